"""Draw book/_ext/static/attnlab-card.png, the preview card of the pages that show no figure of their own.

A link to the book shared in a course forum or a chat shows a card (OpenGraph's og:image): a
chapter shows its first figure (sphinxext-opengraph's ``ogp_use_first_image``); a page with no
raster figure (the front matter, a chapter that opens with a vector diagram) shows this card: the
logo and the book's title from _config.yml, 1200 x 630 pixels (the size the forums ask for).
Drawn by the Chromium of the website's checks: ``python scripts/make_card.py``; committed.
"""

from __future__ import annotations

import html
import shutil
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CARD = ROOT / "book" / "_ext" / "static" / "attnlab-card.png"  # served as _static/attnlab-card.png


def main() -> int:
    from playwright.sync_api import sync_playwright

    title = yaml.safe_load((ROOT / "_config.yml").read_text(encoding="utf-8"))["title"]
    name, _, subtitle = title.partition(": ")
    logo = (ROOT / "book" / "images" / "logo.svg").read_text(encoding="utf-8")
    page_html = f"""<!doctype html><html><body style="margin:0">
      <div style="width:1200px;height:630px;box-sizing:border-box;padding:80px 90px;background:#f7f9fd;
                  font-family:'DejaVu Sans',sans-serif;display:flex;flex-direction:column;justify-content:center;
                  border-bottom:24px solid #1f3b73">
        <div style="width:660px">{logo.replace('width="220" height="60"', 'width="660" height="180"')}</div>
        <div style="font-size:54px;color:#1f3b73;margin-top:36px">{html.escape(subtitle.capitalize())}</div>
        <div style="font-size:30px;color:#3d4b66;margin-top:24px">
          An interactive textbook: from the seq2seq bottleneck to the attention of 2026 models</div>
      </div></body></html>"""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or "/usr/bin/chromium")
        page = browser.new_page(viewport={"width": 1200, "height": 630})
        page.set_content(page_html)
        page.screenshot(path=str(CARD))
        browser.close()
    print(f"wrote {CARD.relative_to(ROOT)} ({name})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
