"""The composition root: settings → assembled parts (``assembly``), the ``run`` command (``serve``) and
its worker processes (``supervisor``). Everything above the engine (``sidecar.runtime``) and the
destinations (``exporters``) is wired here, and only here and in the commands."""
