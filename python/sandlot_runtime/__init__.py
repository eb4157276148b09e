"""Python that runs inside sandlot's jail: the zygote and the cell driver.

``zygote.py`` is the zygote's program; it imports ``driver`` before it forks, and with it every
other module, lowest floor first:

- ``state``: the driver's one mutable state, shared by everything below
- ``jsonsafe``: any object coerced to JSON that json.dumps and serde_json accept; MIME bundles
- ``charts``: a figure's chart and a DataFrame's data as JSON, beside their rendering
- ``output``: the server's pipes, each execution's own pipes on fds 1 and 2 and the relay
  thread: what outlives an execution goes to the server as its background output
- ``capture``: sys.stdout/sys.stderr, unbuffered, routed by ``output``, restored after each cell
- ``cell_output``: each Bash cell's own stdout and stderr
- ``protocol``: the control stream's frames, the ordering of output and events, ``emit``
- ``display``: IPython's display system turned into display_data and result events (with
  ``charts``' data), and PIL images saved to a file shown
- ``shell``: the IPython shell, its tracebacks, warm-up and the template's setup code
- ``python_cells``: running a Python cell; SIGINT
- ``bash_session``: running a Bash cell in a persistent bash per context
- ``js_session``: running JavaScript and TypeScript cells in a persistent node per context
  (node runs ``js_kernel.js``, which strips TypeScript's types with ``ts_strip.js``)
- ``contexts``: code contexts, parked and installed in the one shell
- ``changes``: which workspace files a cell created or modified
- ``pickling``: what a saved state carries of a context and how each variable is pickled,
  bounded in time (shared by ``digest`` and ``snapshot``)
- ``digest``: digests of interpreter state, for the server's diff of two sandboxes
- ``snapshot``: saving and loading interpreter state (pause, fork, snapshots)
- ``serve``: the protocol loop that dispatches the server's messages
- ``driver``: the entry points, ``prepare()`` in the zygote and ``main(ctrl_fd)`` in a sandbox
"""
