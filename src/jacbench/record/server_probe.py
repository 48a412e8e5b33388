"""Whether a tracking server answers, asked once and briefly before a sweep relies on it (MLflow's
client waits its timeout on each try, ~35 s in all, before saying anything). Any HTTP answer
counts (an error status, a login asked for); only silence or a refused connection does not."""

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
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)  # a TimeoutError (an OSError) is its own reason
        if isinstance(reason, TimeoutError):
            return f"no answer from {url} within {timeout_s:g} s"
        return f"{url} cannot be reached ({reason})"
