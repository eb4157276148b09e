#!/usr/bin/env python3
"""A smolagents ``CodeAgent`` whose code runs in a sandlot sandbox.

    pip install ./sdk/python smolagents
    SANDLOT_URL=http://127.0.0.1:7878 python examples/smolagents_executor.py --demo
    OPENAI_BASE_URL=http://127.0.0.1:11434/v1 OPENAI_MODEL=qwen2.5-coder \\
        python examples/smolagents_executor.py "What is the 30th Fibonacci number?"

``--demo`` plays the model from a script (no model needed): three code actions that write a
file, use a tool and the variables of earlier steps, and end with ``final_answer``. Without it,
the model is any OpenAI-compatible chat endpoint (``OPENAI_BASE_URL``, ``OPENAI_MODEL``,
``OPENAI_API_KEY``), through smolagents' ``OpenAIServerModel`` (``pip install openai``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, List

from smolagents import CodeAgent, Tool
from smolagents.models import ChatMessage, MessageRole, Model

from sandlot.integrations.smolagents import SandlotExecutor


class CelsiusToFahrenheit(Tool):
    """A tool the agent's code calls; smolagents sends its source to the sandbox."""

    name = "celsius_to_fahrenheit"
    description = "Converts a temperature in degrees Celsius to degrees Fahrenheit."
    inputs = {"celsius": {"type": "number", "description": "degrees Celsius"}}
    output_type = "number"

    def forward(self, celsius: float) -> float:
        return celsius * 9 / 5 + 32


DEMO_STEPS = [
    "Thought: I will record the readings in a file.\n<code>\n"
    "readings = [21.5, 23.0, 19.5]\n"
    "with open('readings.txt', 'w') as f:\n"
    "    f.write('\\n'.join(map(str, readings)))\n"
    "print(len(readings), 'readings saved')\n</code>",
    "Thought: Now the mean, in Fahrenheit, with the tool.\n<code>\n"
    "mean_f = celsius_to_fahrenheit(sum(readings) / len(readings))\n"
    "print(mean_f)\n</code>",
    "Thought: Done.\n<code>\nfinal_answer(f'mean {mean_f:.1f} F over {len(readings)} readings')\n</code>",
]


class ScriptedModel(Model):
    """Answers each step with the next of ``steps`` (what a model would write)."""

    def __init__(self, steps: List[str]) -> None:
        super().__init__(model_id="scripted")
        self.steps = list(steps)
        self.seen: List[Any] = []

    def generate(self, messages: List[Any], stop_sequences: Any = None, **kwargs: Any) -> ChatMessage:
        self.seen.append(messages)
        text = self.steps.pop(0) if self.steps else "<code>\nfinal_answer('out of script')\n</code>"
        return ChatMessage(role=MessageRole.ASSISTANT, content=text)


def main(argv: List[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("task", nargs="?", default="Save three temperature readings, then give their mean in Fahrenheit.")
    p.add_argument("--demo", action="store_true", help="play the model from a script (no model needed)")
    p.add_argument("--max-steps", type=int, default=10)
    args = p.parse_args(argv)
    if args.demo:
        model: Model = ScriptedModel(DEMO_STEPS)
    else:
        from smolagents import OpenAIServerModel

        model = OpenAIServerModel(
            model_id=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
            api_base=os.environ["OPENAI_BASE_URL"],
            api_key=os.environ.get("OPENAI_API_KEY", "none"),
        )
    executor = SandlotExecutor()  # a sandbox on $SANDLOT_URL, deleted when the agent is done
    with CodeAgent(tools=[CelsiusToFahrenheit()], model=model, executor=executor, max_steps=args.max_steps) as agent:
        answer = agent.run(args.task)
        # The code ran in the sandbox: the file it wrote is there.
        readings = executor.sandbox.files.read("readings.txt").decode()
        print(f"sandbox {executor.sandbox.id}: readings.txt holds {readings.split()}")
    print(answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
