"""Colab for the book's MyST chapters (a Sphinx extension, loaded by _config.yml's `local_extensions`).

sphinx-book-theme copies each executed chapter notebook to `_sources/<chapter>.ipynb` for the download
button, but its Colab button points at the chapter's source in the repository, a MyST `.md` file Colab
cannot open. This extension, run after the theme on each page:

* points the Colab button at that `.ipynb` as published with the site on the repository's GitHub Pages
  branch (`ghp-import -n -p -f _build/html` publishes `_build/html` there, `_sources/` included);
* puts a first cell into the downloadable notebook that, on Colab only, fetches the book and installs its
  requirements (the chapter's own first cell, `import lib`, needs both). Elsewhere the cell does nothing.
"""
from __future__ import annotations

import json
from pathlib import Path

PAGES_BRANCH = "gh-pages"
MARKER = '"google.colab" in sys.modules'


def colab_cell(repository_url: str) -> str:
    """The first cell of every downloadable chapter; chapters/setup.md starts with the same cell."""
    return "\n".join([
        "# On Colab only: fetch the book, install its requirements with the CUDA 12 libraries, allow widgets.",
        "import sys",
        f"if {MARKER}:",
        f"    !git clone --quiet --depth 1 {repository_url} /content/book",
        "    %cd /content/book/chapters",
        '    !pip install --quiet -r ../requirements.txt "numba-cuda[cu12]"',
        "    from google.colab import output",
        "    output.enable_custom_widget_manager()",
    ])


def _options(app) -> tuple[str, str]:
    theme = app.config.html_theme_options
    return theme.get("repository_url", "").rstrip("/"), theme.get("launch_buttons", {}).get("colab_url", "")


def add_colab_cell(app, pagename, templatename, context, doctree):
    repository_url, colab_url = _options(app)
    source = context.get("ipynb_source")
    if not (source and repository_url and colab_url):
        return
    path = Path(app.outdir) / "_sources" / source
    nb = json.loads(path.read_text())
    first = "".join(nb["cells"][0]["source"]) if nb["cells"] else ""
    if MARKER not in first:
        cell = {"cell_type": "code", "execution_count": None, "metadata": {"tags": ["colab"]}, "outputs": [],
                "source": colab_cell(repository_url).splitlines(keepends=True)}
        if (nb["nbformat"], nb["nbformat_minor"]) >= (4, 5):
            cell["id"] = "colab-setup"  # cell ids exist from nbformat 4.5 on
        nb["cells"].insert(0, cell)
        path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    org_repo = repository_url.split("github.com/", 1)[-1]
    for group in context.get("header_buttons", []):
        for button in group.get("buttons", []):
            if button.get("text") == "Colab":
                button["url"] = f"{colab_url.rstrip('/')}/github/{org_repo}/blob/{PAGES_BRANCH}/_sources/{source}"


def setup(app):
    # After sphinx-book-theme's launch buttons (priority 501), which copy the notebook and make the button.
    app.connect("html-page-context", add_colab_cell, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
