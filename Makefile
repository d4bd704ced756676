# make book    build the site into $(BOOK_OUT)/_build/html, every notebook executed (simulator without a GPU)
# make test    run the tests (they build the book once more, into a temporary folder, and open it in Chromium)
# make record  time the kernels and write data/ (on the GPU machine: make record PY=python3)
# make student the student edition (solution cells removed) into _build/student
# make lab     JupyterLab on the chapters, opened as notebooks, kernel = the venv (on a GPU with CUDA's libraries)
# make clean   remove build outputs (not the venv)
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DELETE_ON_ERROR:

VENV := .venv
PY ?= $(VENV)/bin/python
# jupyter-book writes into $(BOOK_OUT)/_build; the tests point it at a temporary folder.
BOOK_OUT ?= .
PYTEST_ARGS ?=
CHROMIUM := /usr/bin/chromium

# JavaScript the site serves itself, fetched from the npm registry (pinned; checksums in site/npm.sha256).
HTML_MANAGER := 1.0.15
REQUIREJS := 2.3.8
MATHJAX := 3.2.2
NPM_CACHE := build/npm
JS := build/js-vendor/book-js
VENDOR := $(JS)/require.js $(JS)/html-manager/embed-amd.js $(JS)/anywidget/index.js \
          $(JS)/mathjax/tex-mml-chtml.js

.PHONY: venv vendor book test record student lab clean

# --- Python environment: created if absent, reinstalled whenever requirements.txt changes -------------
STAMP := $(VENV)/.requirements-installed
venv: $(STAMP)
$(VENV)/bin/python:
	python3 -m venv $(VENV)
# pip's config on some machines names find-links folders that do not exist: it warns, harmlessly.
$(STAMP): requirements.txt | $(VENV)/bin/python
	$(VENV)/bin/python -m pip install -q -r requirements.txt 2>&1 | { grep -v "^WARNING: Location .* is ignored" || true; }
	touch $@

# --- Vendored JavaScript ----------------------------------------------------------------------------
vendor: $(VENDOR)

# npm pack downloads the package tarball only (no dependencies, no node_modules); kept as a cache.
# Without npm, the same tarball comes straight from the registry's URL. Either way its checksum must match.
$(NPM_CACHE)/%.tgz: site/npm.sha256
	mkdir -p $(NPM_CACHE)
	if command -v npm >/dev/null; then cd $(NPM_CACHE) && npm pack --silent $(PKG) >/dev/null; \
	else curl -fsSL -o $@ https://registry.npmjs.org/$(TARBALL); fi
	cd $(NPM_CACHE) && grep " $*.tgz$$" ../../site/npm.sha256 | sha256sum -c --quiet -
	touch $@
$(NPM_CACHE)/jupyter-widgets-html-manager-$(HTML_MANAGER).tgz: PKG = @jupyter-widgets/html-manager@$(HTML_MANAGER)
$(NPM_CACHE)/jupyter-widgets-html-manager-$(HTML_MANAGER).tgz: TARBALL = @jupyter-widgets/html-manager/-/html-manager-$(HTML_MANAGER).tgz
$(NPM_CACHE)/requirejs-$(REQUIREJS).tgz: PKG = requirejs@$(REQUIREJS)
$(NPM_CACHE)/requirejs-$(REQUIREJS).tgz: TARBALL = requirejs/-/requirejs-$(REQUIREJS).tgz
$(NPM_CACHE)/mathjax-$(MATHJAX).tgz: PKG = mathjax@$(MATHJAX)
$(NPM_CACHE)/mathjax-$(MATHJAX).tgz: TARBALL = mathjax/-/mathjax-$(MATHJAX).tgz

$(JS)/require.js: $(NPM_CACHE)/requirejs-$(REQUIREJS).tgz
	mkdir -p $(@D)
	tar -xzf $< -O package/require.js > $@

# embed-amd.js finds its icon fonts next to itself: copy them too.
$(JS)/html-manager/embed-amd.js: $(NPM_CACHE)/jupyter-widgets-html-manager-$(HTML_MANAGER).tgz
	rm -rf $(@D) && mkdir -p $(@D)
	tar -xzmf $< -C $(@D) --strip-components=2 --wildcards 'package/dist/embed-amd.js' \
	    'package/dist/*.woff2' 'package/dist/*.woff' 'package/dist/*.ttf' 'package/dist/*.eot' \
	    'package/dist/*.svg' 'package/dist/embed.js.LICENSE.txt'

# The combined TeX/MathML component plus what it loads on demand (fonts, TeX extensions, menu, a11y).
$(JS)/mathjax/tex-mml-chtml.js: $(NPM_CACHE)/mathjax-$(MATHJAX).tgz
	rm -rf $(@D) && mkdir -p $(@D)
	tar -xzmf $< -C $(@D) --strip-components=2 package/es5/tex-mml-chtml.js package/es5/output/chtml \
	    package/es5/input/tex package/es5/input/mml package/es5/ui package/es5/a11y package/es5/sre \
	    package/es5/adaptors

# anywidget's AMD build ships in its pip package: re-copied whenever the requirements are reinstalled.
$(JS)/anywidget/index.js: $(STAMP)
	mkdir -p $(@D)
	cp "$$($(VENV)/bin/python -c 'import anywidget, pathlib; print(pathlib.Path(anywidget.__file__).parent / "nbextension" / "index.js")')" $@

# --- Targets ------------------------------------------------------------------------------------------
# --all: every page is re-read, so every notebook runs again and every warning is reported again.
book: venv vendor
	$(VENV)/bin/jupyter-book build . --all --path-output $(BOOK_OUT) -W -n --keep-going

test: venv vendor $(CHROMIUM)
	$(VENV)/bin/python -m pytest -q --durations=15 tests $(PYTEST_ARGS)

# tests/test_browser.py drives Debian's Chromium through Playwright (never `playwright install`, which
# downloads a browser build of its own). Installed once, on a machine that lacks it (CI runs as root).
$(CHROMIUM):
	$$([ "$$(id -u)" = 0 ] || echo sudo) apt-get update -q
	$$([ "$$(id -u)" = 0 ] || echo sudo) env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium

# On the GPU machine (no network) PY=python3: then no venv is made.
record: $(if $(filter $(VENV)/bin/python,$(PY)),venv)
	$(PY) -m tools.record

student: venv
	$(VENV)/bin/python -m tools.student _build/student

# --- JupyterLab -----------------------------------------------------------------------------------------
# The chapters are MyST .md files: jupytext's JupyterLab extension (shipped inside the jupytext package) opens
# them as notebooks once it is their default viewer, set in jupyter/labconfig/default_setting_overrides.json
# (read from every folder on JUPYTER_CONFIG_PATH). JUPYTER_PATH puts the venv's "python3" kernel before any
# a user installed elsewhere, so the kernel is this venv. LAB_ARGS: more options (the test gives a port, a token).
# On a GPU machine numba-cuda also needs the CUDA libraries for the driver's CUDA version, as nvidia-smi
# reports it (CUDA= skips them). With CUDA 12, the CUDA 13 NVVM of requirements.txt would be found before
# theirs (`import lib` names the same fix), so it is removed. Jupyter refuses root unless told (GPU containers
# and CI run as root).
LAB_ARGS ?=
CUDA ?= $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9]*\)\..*/\1/p' | head -n 1 | \
                awk '$$1 >= 13 {print "cu13"} $$1 == 12 {print "cu12"}')
$(VENV)/.cuda-%: $(STAMP)
	$(VENV)/bin/python -m pip install -q "$$(sed -n 's/^numba-cuda==/numba-cuda[$*]==/p' requirements.txt)"
	$(if $(filter cu12,$*),$(VENV)/bin/python -m pip uninstall -q -y nvidia-nvvm)
	touch $@

lab: venv $(addprefix $(VENV)/.cuda-,$(CUDA))
	JUPYTER_CONFIG_PATH="$(CURDIR)/jupyter" JUPYTER_PATH="$(CURDIR)/$(VENV)/share/jupyter" \
	    $(VENV)/bin/jupyter-lab chapters/ $(if $(filter 0,$(shell id -u)),--allow-root) $(LAB_ARGS)

clean:
	rm -rf _build build
