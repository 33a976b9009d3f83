"""``cpu2gpu server``: the findings in the editor, as a Language Server Protocol server.

- ``documents``: what one open document (a Python file or a notebook's code cells) has to say:
  its findings and, on request, the text each fix (or all of them) makes of it. No LSP in it.
- ``diagnose``: what a worker process computes: a snapshot's diagnostics, and its fixes' texts.
- ``workers``: the worker processes (a job is cancelled by killing its process).
- ``framing``, ``protocol``: the frames read so that a broken one costs only itself, and the
  JSON-RPC errors pygls leaves unanswered.
- ``server``: the pygls server (the optional extra ``cpu2gpu[lsp]``): diagnostics while the user
  types, debounced and computed in the workers, and the fixes as code actions.
"""
