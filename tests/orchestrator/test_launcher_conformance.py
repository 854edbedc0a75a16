"""Hydra's own launcher conformance suites, run against ``hydra/launcher=parsl``.

Every job really goes through Parsl: an MPIExecutor on the local site, a worker
pool, Hydra's ``run_job`` on the worker.
"""

from pytest import mark

from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite


@mark.parametrize("launcher_name, overrides", [("parsl", [])])
class TestParslLauncher(LauncherTestSuite):
    pass


@mark.parametrize(
    "task_launcher_cfg, extra_flags",
    [
        (
            {
                "defaults": [
                    {"override hydra/launcher": "parsl"},
                    {"override hydra/hydra_logging": "disabled"},
                    {"override hydra/job_logging": "disabled"},
                    "_self_",
                ]
            },
            ["-m"],
        )
    ],
)
class TestParslLauncherIntegration(IntegrationTestSuite):
    pass
