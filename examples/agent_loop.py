#!/usr/bin/env python3
"""An agent loop: a chat model behind any OpenAI-compatible chat completions endpoint, given a
``run_python`` tool that runs code in a sandlot sandbox, looping until the model answers
without calling a tool.

    OPENAI_BASE_URL=http://127.0.0.1:8000/v1 python examples/agent_loop.py "What is the 200th prime?"

Environment:
  OPENAI_BASE_URL   base URL of the endpoint, up to and including /v1 (required)
  OPENAI_API_KEY    sent as a bearer token when set
  OPENAI_MODEL      model name (default: gpt-4o-mini)
  SANDLOT_URL       sandlot server (default: http://127.0.0.1:7878)
  SANDLOT_API_KEY   sandlot API key (default: for a server on this machine, the local admin
                    key it keeps in ~/.local/share/sandlot/api-key, or $SANDLOT_DATA_DIR/api-key)

Only ``httpx`` and the ``sandlot`` SDK are needed (no ``openai`` package).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any, Callable, Dict, List, Optional

import httpx

from sandlot import Sandbox
from sandlot.tools import ToolDispatcher, run_python_tool

SYSTEM_PROMPT = (
    "You are a careful assistant with a Python sandbox. Use the run_python tool to compute, "
    "check and explore instead of guessing; state persists between calls. When you are done, "
    "answer the user directly without calling a tool."
)


def chat_completion(
    client: httpx.Client,
    base_url: str,
    model: str,
    messages: List[Dict[str, Any]],
    tools: List[Dict[str, Any]],
    api_key: Optional[str] = None,
) -> Dict[str, Any]:
    """One chat completions call; returns the first choice's message."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    resp = client.post(
        base_url.rstrip("/") + "/chat/completions",
        json={"model": model, "messages": messages, "tools": tools, "tool_choice": "auto"},
        headers=headers,
    )
    if resp.status_code >= 400:
        raise RuntimeError(f"chat completions failed ({resp.status_code}): {resp.text[:1000]}")
    doc = resp.json()
    try:
        return doc["choices"][0]["message"]
    except (KeyError, IndexError, TypeError) as e:
        raise RuntimeError(f"unexpected chat completions response: {json.dumps(doc)[:1000]}") from e


def run_agent(
    task: str,
    *,
    sandbox: Any,
    base_url: str,
    model: str = "gpt-4o-mini",
    api_key: Optional[str] = None,
    max_turns: int = 20,
    vision: bool = False,
    http_client: Optional[httpx.Client] = None,
    log: Callable[[str], None] = lambda s: None,
) -> str:
    """Run ``task`` to a final answer and return it.

    Each turn sends the conversation with the ``run_python`` tool; every tool call the model
    makes is run in ``sandbox`` and answered with a tool message. With ``vision=True``, images
    the code produced (figures) are shown to the model in a user message after the tool
    messages, since tool messages cannot carry images.
    """
    dispatcher = ToolDispatcher(sandbox, timeout=120)
    tools = [run_python_tool("openai")]
    messages: List[Dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": task},
    ]
    client = http_client or httpx.Client(timeout=httpx.Timeout(300.0, connect=10.0))
    try:
        for turn in range(max_turns):
            msg = chat_completion(client, base_url, model, messages, tools, api_key)
            calls = msg.get("tool_calls") or []
            assistant: Dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
            if calls:
                assistant["tool_calls"] = calls
            messages.append(assistant)
            if not calls:
                return msg.get("content") or ""
            images = []
            for call in calls:
                fn = call.get("function", {})
                log(f"--- turn {turn + 1}: {fn.get('name')} {fn.get('arguments')}")
                reply = dispatcher.handle_openai_tool_call(call)
                log(reply["content"])
                messages.append(reply)
                images.extend(dispatcher.last_images)
            if vision and images:
                messages.append(dispatcher.openai_image_message(images))
        raise RuntimeError(f"no final answer after {max_turns} turns")
    finally:
        if http_client is None:
            client.close()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("task", help="what to ask the model")
    parser.add_argument("--model", default=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"))
    parser.add_argument("--max-turns", type=int, default=20)
    parser.add_argument("--vision", action="store_true", help="show produced images to the model")
    parser.add_argument("--quiet", action="store_true", help="do not print tool calls to stderr")
    args = parser.parse_args(argv)

    base_url = os.environ.get("OPENAI_BASE_URL")
    if not base_url:
        parser.error("set OPENAI_BASE_URL to an OpenAI-compatible endpoint (e.g. http://127.0.0.1:8000/v1)")
    log = (lambda s: None) if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))

    with Sandbox(metadata={"example": "agent_loop"}) as sandbox:
        log(f"sandbox {sandbox.id}")
        answer = run_agent(
            args.task,
            sandbox=sandbox,
            base_url=base_url,
            model=args.model,
            api_key=os.environ.get("OPENAI_API_KEY"),
            max_turns=args.max_turns,
            vision=args.vision,
            log=log,
        )
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
