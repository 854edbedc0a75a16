"""One sweep's life, from Hydra's config to ended runs.

``app`` is the Hydra application (its config tree in ``conf/``, its schema in ``schema``);
``runspec`` turns a job's config into a validated ``RunSpec``; ``launcher`` is the Hydra
launcher (``hydra/launcher=parsl``) and ``observer`` its interface, ``compose`` its fast
job composition and ``job_returns`` what it hands Hydra back; ``recorder`` is scalestudy's
observer: ``admission`` (validate, predict, plan batch jobs), ``dry_run``, registration and
the run-time state (``attempts``, ``retry_policy``, ``database_outages``, ``progress``),
ending in an ``outcome``. ``prediction`` and ``budget_plan`` use the study's model fit;
``provenance`` records where a run came from.
"""
