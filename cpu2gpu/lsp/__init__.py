"""``cpu2gpu server``: the findings in the editor, as a Language Server Protocol server.

- ``documents``: what one open document (a Python file or a notebook's code cells) has to say:
  its findings and, on request, the text each fix (or all of them) makes of it. No LSP in it.
- ``server``: the pygls server (the optional extra ``cpu2gpu[lsp]``): diagnostics while the user
  types, debounced and computed on a worker thread, and the fixes as code actions.
"""
