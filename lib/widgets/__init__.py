"""Interactive widgets (anywidget): each keeps its logic in a JavaScript file beside it, so it stays live on
the static site without a Python kernel, and a Python twin of that logic in lib that tests compare with."""
