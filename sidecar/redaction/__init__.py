"""Personal data out of a run before a judge reads it (docs/redaction.md): the entities (``entities``), Presidio set
up once per process (``engine``), the walk over a run's traced content (``walk``) and the judge's redactor
(``redactor``), which implements ``sidecar.scoring.redaction.RunRedactor``."""
