"""The login-node side of scalestudy: CLI, Hydra app, sweep launching and state."""
