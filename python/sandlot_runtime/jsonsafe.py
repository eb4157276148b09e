"""JSON the control stream can always carry: nothing that ``json.dumps`` (or serde_json on the
server) would reject ever reaches it. Coercion of any object to JSON data, UTF-8-safe strings,
reprs that cannot raise, and Jupyter MIME bundles."""

from __future__ import annotations

import base64
import math
import numbers

# MIME types whose values are binary: Jupyter carries them as base64 strings.
BINARY_MIME_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "application/pdf"})
# Text-like MIME types that are not under text/.
TEXT_MIME_TYPES = frozenset({"image/svg+xml", "application/javascript"})
# How deep jsonable() follows nested containers before it settles for repr().
MAX_JSON_DEPTH = 64


class JSONData(dict):
    """A dict that already is JSON the control stream carries as it is (str keys, finite
    floats, UTF-8-safe strings, nothing else): ``jsonable`` passes it through instead of walking
    it again. For large values built carefully (a chart's points), not for user data."""

    __slots__ = ()


def clean_str(value: str) -> str:
    """A str that encodes as UTF-8. Lone surrogates (from surrogateescape'd bytes or bad
    escapes) become visible backslash escapes instead of crashing the encoder; serde_json
    rejects them even when they are \\u-escaped."""
    if type(value) is not str:
        value = str.__str__(value)
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        # Pairs written as two escapes ("\ud83d\ude00") are one character; join them first.
        value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "surrogatepass")
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


def safe_repr(value: object) -> str:
    try:
        return clean_str(repr(value))
    except Exception:  # a broken __repr__ must not break the driver
        return f"<unrepresentable {type(value).__name__} object>"


def safe_str(value: object) -> str:
    try:
        return clean_str(str(value))
    except Exception:
        return safe_repr(value)


def jsonable(value: object, depth: int = 0) -> object:
    """Coerces any object into JSON data: str/int/float/bool/None, lists and str-keyed dicts.
    Never raises; whatever it cannot convert becomes its repr."""
    try:
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str):
            return clean_str(value)
        if isinstance(value, int):
            # Beyond 64 bits serde_json would lose it, and str() of a huge int can raise.
            return int(value) if value.bit_length() <= 64 else f"<int of {value.bit_length()} bits>"
        if isinstance(value, float):
            return float(value) if math.isfinite(value) else repr(float(value))
        if type(value) is JSONData:
            return value
        if depth >= MAX_JSON_DEPTH:
            return safe_repr(value)
        if isinstance(value, dict):
            return {
                (clean_str(k) if isinstance(k, str) else safe_str(k)): jsonable(v, depth + 1)
                for k, v in list(value.items())
            }
        if isinstance(value, (list, tuple, set, frozenset)):
            return [jsonable(v, depth + 1) for v in list(value)]
        if isinstance(value, (bytes, bytearray, memoryview)):
            return base64.b64encode(bytes(value)).decode("ascii")
        if isinstance(value, numbers.Integral):  # numpy integers and friends
            return jsonable(int(value), depth + 1)
        if isinstance(value, numbers.Real):
            return jsonable(float(value), depth + 1)
        tolist = getattr(value, "tolist", None)  # numpy arrays
        if callable(tolist):
            return jsonable(tolist(), depth + 1)
    except Exception:  # (not BaseException: an interrupt must still get through)
        pass
    return safe_repr(value)


def mime_bundle(data: object) -> dict:
    """A Jupyter MIME bundle: text types as str, binary types as base64 str, JSON types as JSON."""
    if not isinstance(data, dict):
        return {"text/plain": safe_repr(data)}
    bundle = {}
    for key, value in list(data.items()):
        mime = safe_str(key)
        textual = mime.startswith("text/") or mime in TEXT_MIME_TYPES
        if isinstance(value, (bytes, bytearray, memoryview)):
            raw = bytes(value)
            bundle[mime] = clean_str(raw.decode("utf-8", "replace")) if textual else \
                base64.b64encode(raw).decode("ascii")
        elif mime in BINARY_MIME_TYPES and isinstance(value, str):
            # Some encoders wrap base64 in newlines; strict decoders reject them.
            bundle[mime] = "".join(clean_str(value).split())
        elif textual and not isinstance(value, str):
            bundle[mime] = safe_str(value)
        else:
            bundle[mime] = jsonable(value)
    return bundle
