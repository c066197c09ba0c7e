"""Presidio, set up once per process: the analyzer for a set of entities, and the anonymizer.

Choices, each measured (docs/redaction.md, bench/redaction.py):

- **No NLP pipeline for the patterns.** Presidio runs an NLP pipeline over every text for two things: named
  entities (names and places) and the tokens its context enhancer reads to raise a pattern's score when a word
  like "card" stands near it. A redaction keeps every match whatever its score, so the context changes nothing:
  the pattern entities run over Presidio's ``NoOpNlpEngine`` and no context enhancer, 6x cheaper than a blank
  spaCy pipeline (0.18 against 1.1 ms for e-mail, card and IBAN over 340 characters). Names and places
  (``names: true``) run the spaCy model the settings name, installed as a package (or a path): never downloaded.
- **No network.** Presidio's e-mail recognizer checks the domain with ``tldextract``, which fetches the public
  suffix list on first use; here it reads the snapshot that tldextract ships, and never tries.
- **Built once per process** for a set of entities (``analyzer_for`` is cached): at start-up, when the assembly
  builds each judge's redactor; every run after that only analyzes.
- **Quiet.** Presidio's loggers may print the words around a match at DEBUG: they are held at WARNING, so a
  redacted value cannot reach a log whatever the sidecar's own level.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sidecar.redaction.entities import ENTITIES, NAME_ENTITIES

if TYPE_CHECKING:
    from presidio_analyzer import AnalyzerEngine, EntityRecognizer, RecognizerResult
    from presidio_anonymizer import AnonymizerEngine

__all__ = [
    "INSTALL_HINT",
    "Finding",
    "Replace",
    "analyzer_for",
    "anonymize",
    "anonymizer",
    "find",
    "missing_packages",
    "model_problem",
]

# The packages redaction needs beyond the base install (the `redact` extra, docs/redaction.md).
_PACKAGES = ("presidio_analyzer", "presidio_anonymizer")
INSTALL_HINT = "pip install 'scoring-sidecar[redact]'"
# The operator every replacement goes through: a function of the entity and the value, per run.
_OPERATOR = "sidecar_replace"
_LANGUAGE = "en"
# Presidio's loggers: held at WARNING (the module docstring says why).
_LOGGERS = ("presidio-analyzer", "presidio-anonymizer")

Replace = Callable[[str, str], str]  # (entity, value) -> what the judge reads instead


@dataclass(frozen=True, slots=True)
class Finding:
    """A value found in a text: its entity and where it is (what Presidio's anonymizer reads of a result)."""

    entity_type: str
    start: int
    end: int
    score: float = 1.0


def missing_packages() -> str | None:
    """Why redaction cannot run in this environment (one line), or ``None``: checked without importing."""
    missing = [name.replace("_", "-") for name in _PACKAGES if not _installed(name)]
    if not missing:
        return None
    return f"redaction needs {' and '.join(missing)}, which are not installed: {INSTALL_HINT}"


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a broken install, or a module blocked in sys.modules
        return False


def model_problem(model: str) -> str | None:
    """Why the spaCy model for names and places cannot be loaded (one line), or ``None``: an installed package
    or a pipeline's folder; never downloaded."""
    if Path(model).is_dir() or _installed(model):
        return None
    return (
        f"names: true needs the spaCy model {model!r} installed as a package (or a pipeline's folder); it is not "
        "installed here and is never downloaded at run time (docs/redaction.md: adding a model)"
    )


def _quiet() -> None:
    for name in _LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


@functools.cache
def _public_suffixes() -> Callable[[str], Any]:
    import tldextract

    # No cache directory and no URL: the snapshot the package ships, with no fetch ever attempted.
    return tldextract.TLDExtract(cache_dir=None, suffix_list_urls=())


def _recognizer(name: str) -> EntityRecognizer:
    from presidio_analyzer import predefined_recognizers

    entity = ENTITIES[name]
    cls = getattr(predefined_recognizers, entity.recognizer)
    if name == "EMAIL_ADDRESS":
        return _offline_email(cls)
    # Every recognizer runs on the one language the analyzer reads: the patterns do not depend on it.
    recognizer: EntityRecognizer = cls(supported_language=_LANGUAGE)
    return recognizer


def _offline_email(cls: type[Any]) -> EntityRecognizer:
    suffixes = _public_suffixes()

    class OfflineEmailRecognizer(cls):  # type: ignore[misc]
        """Presidio's e-mail recognizer, checking the domain against the shipped public suffix snapshot."""

        def validate_result(self, pattern_text: str) -> bool:
            return bool(suffixes(pattern_text).fqdn)

    recognizer: EntityRecognizer = OfflineEmailRecognizer(supported_language=_LANGUAGE)
    return recognizer


@functools.cache
def analyzer_for(entities: frozenset[str], names_model: str | None = None) -> AnalyzerEngine:
    """The analyzer that finds ``entities`` (names and places too with a spaCy model), built once per process."""
    _quiet()
    from presidio_analyzer import AnalyzerEngine, RecognizerRegistry
    from presidio_analyzer.context_aware_enhancers import ContextAwareEnhancer
    from presidio_analyzer.nlp_engine import NlpEngine, NoOpNlpEngine, SpacyNlpEngine
    from presidio_analyzer.predefined_recognizers import SpacyRecognizer

    class NoContext(ContextAwareEnhancer):
        """Every match is redacted whatever its score: the context that would raise it changes nothing."""

        def __init__(self) -> None:
            super().__init__(0, 0, 0, 0)

        def enhance_using_context(
            self, text: str, raw_results: list[RecognizerResult], *args: Any, **kwargs: Any
        ) -> list[RecognizerResult]:
            return raw_results

    recognizers = [_recognizer(name) for name in sorted(entities)]
    nlp: NlpEngine
    if names_model is None:
        nlp = NoOpNlpEngine(models=[{"lang_code": _LANGUAGE, "model_name": "none"}])
        nlp.load()
    else:
        import spacy

        problem = model_problem(names_model)
        if problem is not None:  # the settings checked it; a model removed since start-up fails here, plainly
            raise RuntimeError(problem)
        nlp = SpacyNlpEngine(models=[{"lang_code": _LANGUAGE, "model_name": names_model}])
        # Loaded here rather than by SpacyNlpEngine.load(), which downloads a model it does not find.
        nlp.nlp = {_LANGUAGE: spacy.load(names_model)}  # type: ignore[assignment]  # typed None until loaded
        recognizers.append(SpacyRecognizer(supported_language=_LANGUAGE, supported_entities=list(NAME_ENTITIES)))
    registry = RecognizerRegistry(recognizers=recognizers, supported_languages=[_LANGUAGE])
    return AnalyzerEngine(
        registry=registry, nlp_engine=nlp, supported_languages=[_LANGUAGE], context_aware_enhancer=NoContext()
    )


def find(analyzer: AnalyzerEngine, text: str) -> list[Finding]:
    """Every match in ``text``, whatever its score (a recognizer's own threshold would let weak matches through)."""
    results: list[RecognizerResult] = analyzer.analyze(text, language=_LANGUAGE, score_threshold=0.0)
    return [Finding(r.entity_type, r.start, r.end, r.score) for r in results]


@functools.cache
def anonymizer() -> AnonymizerEngine:
    """Presidio's anonymizer with one operator of ours: the run's ``Replace`` function, passed per call."""
    _quiet()
    from presidio_anonymizer import AnonymizerEngine
    from presidio_anonymizer.operators import Operator, OperatorType

    class RunReplacement(Operator):
        """What the run's policy makes of a value (a placeholder, a mask, a keyed hash)."""

        def operate(self, text: str, params: dict[str, Any] | None = None) -> str:
            assert params is not None
            replace: Replace = params["replace"]
            return replace(params["entity_type"], text)

        def validate(self, params: dict[str, Any] | None = None) -> None:
            if params is None or not callable(params.get("replace")):
                raise ValueError("the run's replacement function is missing")

        def operator_name(self) -> str:
            return _OPERATOR

        def operator_type(self) -> OperatorType:
            return OperatorType.Anonymize

    engine = AnonymizerEngine()  # type: ignore[no-untyped-call]
    engine.add_anonymizer(RunReplacement)
    return engine


def anonymize(text: str, results: Sequence[Finding], replace: Replace) -> tuple[str, list[str]]:
    """``text`` with every match replaced (overlaps resolved by Presidio: a match inside another is dropped), and
    the entity of each replacement made."""
    from presidio_anonymizer.entities import OperatorConfig

    done = anonymizer().anonymize(
        text=text,
        analyzer_results=list(results),  # type: ignore[arg-type]  # read by attribute: start, end, entity_type, score
        operators={"DEFAULT": OperatorConfig(_OPERATOR, {"replace": replace})},
        # Two values side by side stay two values (two addresses are two placeholders, and two counts).
        merge_entities_with_spaces=False,
    )
    return done.text, [item.entity_type for item in done.items]
