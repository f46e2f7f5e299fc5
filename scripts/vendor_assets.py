"""Copy the website's JavaScript from node_modules into _build/vendor-root/vendor/.

Sphinx copies _build/vendor-root/ into the site's root (html_extra_path in _config.yml), so
the pages load MathJax, RequireJS and the Jupyter widget manager from the site itself:
math and widgets render with no network. The files stay out of _static/, which Jupyter Book
would inject into every page.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = ROOT / "node_modules"
TARGET = ROOT / "_build" / "vendor-root" / "vendor"

# RequireJS resolves the widget manager's AMD modules relative to its baseUrl, and webpack then
# finds the icon fonts next to the module that asked for them
# (<baseUrl>/@jupyter-widgets/html-manager/dist/<hash>.woff2). So the baseUrl is vendor/ and the
# package keeps its npm layout under it, wherever the page sits in the site.
WIDGETS_CONFIG = """\
// attnlab: make RequireJS load the Jupyter widget manager from this site, not a CDN.
(function () {
  var here = document.currentScript.src;
  var base = here.substring(0, here.lastIndexOf("/") + 1);
  window.require.config({ baseUrl: base });

  // The widget manager was written for MathJax 2 and typesets widget labels with
  // MathJax.Hub.Queue(["Typeset", MathJax.Hub, element]). The site runs MathJax 3, which has no
  // Hub: translate the call. Installed on "load", after MathJax 3 has replaced window.MathJax and
  // before the widget manager renders (its own "load" listener is registered after this one).
  function typeset(element) {
    var mj = window.MathJax;
    if (mj && mj.startup && mj.startup.promise) {
      mj.startup.promise.then(function () { return mj.typesetPromise([element]); });
    }
  }
  window.addEventListener("load", function () {
    if (window.MathJax && !window.MathJax.Hub) {
      window.MathJax.Hub = { Queue: function (job) { typeset(job[2]); } };
    }
  });
})();
"""


def main() -> int:
    sources = {
        MODULES / "mathjax" / "es5": TARGET / "mathjax",
        MODULES / "@jupyter-widgets" / "html-manager" / "dist": TARGET / "@jupyter-widgets" / "html-manager" / "dist",
    }
    missing = [str(p) for p in [*sources, MODULES / "requirejs" / "require.js"] if not p.exists()]
    if missing:
        print("vendor_assets: missing (run `npm ci` first):\n  " + "\n  ".join(missing), file=sys.stderr)
        return 1
    if TARGET.exists():
        shutil.rmtree(TARGET)
    for source, target in sources.items():
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("*.map", "*.LICENSE.txt"))
    shutil.copy2(MODULES / "requirejs" / "require.js", TARGET / "require.min.js")
    (TARGET / "widgets-config.js").write_text(WIDGETS_CONFIG, encoding="utf-8")
    size = sum(f.stat().st_size for f in TARGET.rglob("*") if f.is_file()) / 2**20
    print(f"vendor_assets: {TARGET.relative_to(ROOT)} ({size:.1f} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
