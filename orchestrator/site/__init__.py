"""The site as data: what a machine is and how it is reached.

``config`` loads and validates a site file into a ``SiteConfig``; ``checks`` holds the form
of every value that reaches a shell; ``schedulers`` and ``launchers`` hold what each
scheduler and MPI launcher means, one class each in a table; ``queues`` the facility's
queue table; ``allocation`` which batch jobs a sweep asks for; ``network`` the interconnect
for predictions; ``nccl`` NCCL's network plugin and its settings; ``model_inputs`` the site as the performance model sees it.
"""

from .config import SiteConfig, known_sites, load_site, with_overrides

__all__ = ["SiteConfig", "known_sites", "load_site", "with_overrides"]
