"""How the fast path leaves the pod: which CA certificates it trusts and which proxy it goes through.

Both are settled once per transport, when it is made (so the environment is read then, not per call).
"""

from __future__ import annotations

import ssl
from pathlib import Path

from aiohttp import BasicAuth
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

__all__ = ["env_proxy", "tls_context"]


def tls_context(ca_bundle: Path | None) -> ssl.SSLContext:
    """A verifying client context trusting ``ca_bundle`` (a PEM file) only, else the default paths.

    The default paths are OpenSSL's, which honour ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` as they are
    when this runs. aiohttp's own default context is made when aiohttp is imported, before a
    configuration could set them, so the transport never relies on it.
    """
    if ca_bundle is None:
        return ssl.create_default_context()
    try:
        return ssl.create_default_context(cafile=str(ca_bundle))
    except (OSError, ssl.SSLError) as exc:
        # ssl's own messages ("[X509: NO_CERTIFICATE_OR_CRL_FOUND] ...") do not say which file.
        raise ValueError(f"ca_bundle {str(ca_bundle)!r} is not a readable PEM file of CA certificates: {exc}") from exc


def env_proxy(url: URL) -> tuple[URL | None, BasicAuth | None]:
    """The proxy ``HTTPS_PROXY``/``HTTP_PROXY`` name for ``url`` unless ``NO_PROXY`` covers its host.

    The same rules aiohttp applies per request under ``trust_env=True`` (its helper, which asks
    ``urllib.request``): lower-case variables win, ``NO_PROXY`` entries match the host exactly or as a
    domain suffix, ``*`` matches every host, and ``https://`` proxy URLs are ignored with a warning.
    Resolving it here once spares every call the two thread-pool round trips ``trust_env`` costs.
    """
    try:
        return get_env_proxy_for_url(url)
    except LookupError:
        return None, None
