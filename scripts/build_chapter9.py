"""Write chapters/09_inference.ipynb from scripts/chapter9_cells.py (used once, while drafting)."""
import json
import runpy
import sys

import nbformat

cells = runpy.run_path(sys.argv[1])["CELLS"]
meta = json.load(open("chapters/08_modern_attention.ipynb"))["metadata"]
nb = nbformat.v4.new_notebook()
nb.metadata = {k: v for k, v in meta.items() if k != "attnlab"}
for kind, text in cells:
    nb.cells.append(nbformat.v4.new_markdown_cell(text) if kind == "markdown" else nbformat.v4.new_code_cell(text))
nbformat.write(nb, sys.argv[2])
