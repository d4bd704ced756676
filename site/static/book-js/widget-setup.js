// Loaded after require.js and before @jupyter-widgets/html-manager's embed-amd.js (see _config.yml), on
// pages that carry widget state, so the widgets render from that state with no kernel and no CDN.
(function () {
  var here = document.currentScript.src.replace(/[^/]*$/, "");

  // The html-manager asks require.js for each widget's module by name. The module `anywidget` is the AMD
  // build copied from the anywidget pip package into the folder next to this file.
  // embed-amd.js finds its icon fonts relative to the URL require.js gives the name of the module that
  // asks for them, which would be <page folder>/@jupyter-widgets/html-manager/dist/ for the manager and
  // <page folder>/@jupyter-widgets/ for @jupyter-widgets/base and /controls (all defined inside
  // embed-amd.js): map those names to the folder embed-amd.js and its fonts are in.
  require.config({
    paths: {
      anywidget: here + "anywidget/index",
      "@jupyter-widgets/html-manager/dist": here + "html-manager",
      "@jupyter-widgets": here + "html-manager",
    },
  });

  // For a module require.js cannot find, the html-manager falls back to the CDN named by a script's
  // `data-jupyter-widgets-cdn` attribute (jsdelivr when absent). Name a folder of this site that does not
  // exist: a missing module then fails here, visibly, instead of being fetched from another host.
  document.currentScript.setAttribute("data-jupyter-widgets-cdn", here + "no-cdn/");

  // @jupyter-widgets/base typesets widget labels with MathJax 2's MathJax.Hub.Queue; the book loads
  // MathJax 3, which has no Hub, so every labelled widget would throw. Whatever object becomes
  // window.MathJax (MathJax 3 replaces its configuration object with itself as it loads) gets a Hub
  // that forwards to MathJax 3's typesetPromise, or does nothing until MathJax is ready.
  var hub = {
    Queue: function (job) {
      if (window.MathJax.typesetPromise) window.MathJax.typesetPromise([job[2]]);
    },
  };
  var mathjax = window.MathJax;
  if (mathjax && mathjax.version && !mathjax.Hub) mathjax.Hub = hub;
  Object.defineProperty(window, "MathJax", {
    configurable: true,
    enumerable: true,
    get: function () {
      return mathjax;
    },
    set: function (value) {
      mathjax = value;
      if (value && value.version && !value.Hub) value.Hub = hub;
    },
  });
})();
