"""A small Server-Sent Events decoder (https://html.spec.whatwg.org/#event-stream-interpretation)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Iterator, List, Optional


@dataclass
class SSEEvent:
    event: str
    data: str
    id: Optional[str] = None


class SSEDecoder:
    """Feed it lines (without their line terminator); it returns an event at each blank line."""

    def __init__(self) -> None:
        self._event = ""
        self._data: List[str] = []
        self._id: Optional[str] = None

    def feed(self, line: str) -> Optional[SSEEvent]:
        line = line.rstrip("\r\n")
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # comment / keep-alive
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._event = value
        elif name == "data":
            self._data.append(value)
        elif name == "id":
            self._id = value
        # "retry" and unknown fields are ignored
        return None

    def flush(self) -> Optional[SSEEvent]:
        """The last event, if the stream ended without its terminating blank line."""
        return self._dispatch()

    def _dispatch(self) -> Optional[SSEEvent]:
        if not self._data and not self._event:
            return None
        ev = SSEEvent(event=self._event or "message", data="\n".join(self._data), id=self._id)
        self._event = ""
        self._data = []
        return ev


def iter_sse(lines: Iterable[str]) -> Iterator[SSEEvent]:
    """Decode every event in ``lines``: single lines without terminators (as ``httpx``'s
    ``iter_lines`` gives them, ``""`` for a blank line) or chunks holding several lines."""
    dec = SSEDecoder()
    for chunk in lines:
        for line in chunk.splitlines() if chunk else [""]:
            ev = dec.feed(line)
            if ev is not None:
                yield ev
    ev = dec.flush()
    if ev is not None:
        yield ev
