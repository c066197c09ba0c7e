"""Judges that have no API key to send: named before anything is scored, by ``eval`` (which stops) and by
``run`` and ``validate`` (which warn: a key may be set where the service runs, not where it was checked)."""

from __future__ import annotations

from sidecar.settings import EvalSettings

__all__ = ["judges_without_key"]


def _key_variables(litellm_model: str) -> list[str]:
    """The environment variables litellm wants for ``litellm_model`` and does not find, when all it lacks is
    an API key. Providers that authenticate otherwise (cloud credentials, instance roles, a local server's
    base URL: Bedrock, Vertex, Azure, Ollama) give ``[]``: guessing there would refuse working set-ups."""
    import litellm

    try:
        missing = list(litellm.validate_environment(model=litellm_model).get("missing_keys") or [])
    except Exception:  # an id litellm cannot place: the first call will say what is wrong
        return []
    return missing if missing and all(name.endswith("_API_KEY") for name in missing) else []


def judges_without_key(settings: EvalSettings) -> list[str]:
    """One line per judge that scorers use and that would be refused for want of a key: no ``api_key``, no
    ``api_base``, and the provider's usual variable unset. A judge with an ``api_base`` is left alone: an
    OpenAI-compatible server of your own (vLLM, LM Studio, Ollama's OpenAI endpoint) often needs no key."""
    missing = []
    used = {s.judge for s in settings.scorers if s.judge is not None}
    for name, judge in settings.judges.items():
        model = judge.to_judge_model()
        if name not in used or model.api_base or model.resolved_api_key() is not None:
            continue
        variables = ["OPENAI_API_KEY"] if model.provider == "openai" else _key_variables(model.litellm_model)
        if variables:
            missing.append(
                f"judge {name!r} ({model.litellm_model}) has no API key: set {' or '.join(variables)} "
                f"or judges.{name}.api_key"
            )
    return missing
