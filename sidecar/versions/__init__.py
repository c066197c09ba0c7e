"""Agent versions compared while traffic flows (docs/versions.md): the confidence sequences (``sequences``), the
versions of each agent under a bounded set of labels (``registry``) and the comparison of the newest version against
its reference per agent and scorer (``comparison``). Pure: no I/O and no clock of its own (one log line when an
agent's versions outgrow their labels); the Prometheus gauges and the ``compare`` command feed the same scores to the
same code."""
