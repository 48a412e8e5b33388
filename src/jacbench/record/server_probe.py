"""Whether a tracking server answers, asked once and briefly before a sweep relies on it.

MLflow's client waits up to its request timeout on each of its tries (with jacbench's
defaults about 35 s in all) before it says anything: a sweep against a server that accepts
connections and never answers was silent that long before its first job. One plain HTTP
request with a short timeout tells at once; any HTTP answer (an error status, a login asked
for) counts as answering, only silence or a refused connection does not."""

from __future__ import annotations

import urllib.error
import urllib.request

PROBE_S = 5.0  # a live server answers /health at once; this is only the network's slack


def unanswered(uri: str, timeout_s: float = PROBE_S) -> str:
    """Why the tracking server at ``uri`` does not answer ("" where it does, or where
    ``uri`` is no HTTP server: a local store is checked when it is opened)."""
    if not uri.startswith(("http://", "https://")):
        return ""
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s):  # noqa: S310 (http(s) only)
            return ""
    except urllib.error.HTTPError:
        return ""  # it answered, if only to refuse
    except TimeoutError:
        return f"no answer from {url} within {timeout_s:g} s"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):
            return f"no answer from {url} within {timeout_s:g} s"
        return f"{url} cannot be reached ({reason})"
