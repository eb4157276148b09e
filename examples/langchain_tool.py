#!/usr/bin/env python3
"""sandlot's LangChain tools: ``run_python`` and ``run_bash`` running in one sandbox.

    pip install ./sdk/python langchain-core
    SANDLOT_URL=http://127.0.0.1:7878 python examples/langchain_tool.py

Calls the tools the way a LangChain agent does (tool calls in, ``ToolMessage`` s out, figures as
the message's artifact), so it runs without a model. With one, give the tools to any chat model
that supports tool calling: ``llm.bind_tools(tools)``, or ``create_agent(llm, tools)`` from
``langchain``.
"""

from __future__ import annotations

import sys

from sandlot.integrations.langchain import sandlot_tools


def main() -> int:
    run_python, run_bash = sandlot_tools(timeout=60)
    try:
        # Plain invocation: the text a model would read.
        print(run_python.invoke({"code": "import pandas as pd\ndf = pd.DataFrame({'x': [1, 2, 3]})\nint(df.x.sum())"}))
        # As an agent calls it: a ToolMessage, with the figure in its artifact.
        msg = run_python.invoke(
            {
                "type": "tool_call",
                "id": "call_1",
                "name": "run_python",
                "args": {"code": "import matplotlib.pyplot as plt\nplt.plot(df.x)\nplt.savefig('x.png')\nplt.show()"},
            }
        )
        print(f"{type(msg).__name__} for {msg.tool_call_id}: {msg.content}")
        print(f"artifact: {len(msg.artifact['images'])} image(s)")
        # The shell shares the sandbox and its files.
        print(run_bash.invoke({"code": "ls *.png"}))
        # A mistake comes back as text with the traceback, for the model to repair.
        print(run_python.invoke({"code": "df['y']"}).splitlines()[-1])
    finally:
        run_python.close()  # deletes the sandbox the tools made
    return 0


if __name__ == "__main__":
    sys.exit(main())
