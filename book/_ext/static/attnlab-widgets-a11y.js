// attnlab: accessible names for the Jupyter widgets of the static website.
// Loaded by book/_ext/attnlab_sphinx.py on the pages that hold widgets (see its docstring).
//
// @jupyter-widgets/html-manager 1.0 (ipywidgets 8) draws a slider with noUiSlider, whose handle
// (role="slider") is not tied to the label that shows the widget's description: a screen reader
// meets a slider without a name, whose value is an index ("3" where the readout shows "1.0").
// It also draws widget images, and the images of Output widgets, without an alt. The saved
// widget state cannot carry either, so this fills them in as the widgets render and change:
//   - each handle is named by its widget's label (aria-labelledby) and takes the readout as its
//     aria-valuetext;
//   - each image without alt gets one: the code cell's `mystnb: image: alt` metadata, which the
//     Sphinx extension passes as data-alt on the cell's widget view, else the image's title
//     (attnlab.figure_slider and figure_grid describe each picture in its tooltip).
(function () {
  "use strict";
  var VIEW = 'script[type="application/vnd.jupyter.widget-view+json"]';
  var labels = 0;

  function nameSliders() {
    document.querySelectorAll(".widget-slider").forEach(function (widget) {
      var label = widget.querySelector(":scope > .widget-label");
      var readout = widget.querySelector(":scope > .widget-readout");
      widget.querySelectorAll('[role="slider"]').forEach(function (handle) {
        if (label && label.textContent.trim() && !handle.hasAttribute("aria-labelledby")) {
          if (!label.id) label.id = "attnlab-widget-label-" + ++labels;
          handle.setAttribute("aria-labelledby", label.id);
        }
        var value = readout ? readout.textContent.trim() : "";
        if (value && handle.getAttribute("aria-valuetext") !== value) {
          handle.setAttribute("aria-valuetext", value);
        }
      });
    });
  }

  // The widget manager puts each view into a div.widget-subarea just before the view's <script>.
  function cellAlt(img) {
    for (var area = img.closest(".widget-subarea"); area; area = area.parentElement && area.parentElement.closest(".widget-subarea")) {
      var view = area.nextElementSibling;
      if (view && view.matches(VIEW) && view.dataset.alt) return view.dataset.alt;
    }
    return "";
  }

  function describeImages() {
    document.querySelectorAll(".widget-subarea img:not([alt])").forEach(function (img) {
      var alt = cellAlt(img) || (img.getAttribute("title") || "").trim();
      if (alt) img.setAttribute("alt", alt);
    });
  }

  function update() {
    nameSliders();
    describeImages();
  }

  // Run again after every change to the page's elements: widgets render late, a Stack widget
  // replaces its picture, and when a handle moves noUiSlider rewrites its aria-valuetext, then
  // the widget rewrites the readout's text. The updates set only attributes, so they settle.
  new MutationObserver(update).observe(document.documentElement, { subtree: true, childList: true });
  document.addEventListener("DOMContentLoaded", update);
})();
