"""The documentation site, built as ``make docs`` builds it and looked at in headless Chromium (issue
#39): the project's own look (the inbox's icon and indigo), a getting-started page, no table clipped at
1280 px (the comparison's was), and copy buttons that cover no line of code, at 1280 and 375 px."""

from __future__ import annotations

import contextlib
import functools
import http.server
import os
import subprocess
import threading
from collections.abc import AsyncIterator, Iterator

import pytest
import yaml

from tests.conftest import PYTHON, ROOT
from tests.web import test_inbox_browser as shared
from tests.web.test_inbox_browser import Browser

browser = shared.browser
anyio_backend = shared.anyio_backend
pytestmark = [*shared.pytestmark, pytest.mark.docs]

INBOX_ICON = ROOT / "src" / "hitl_mcp" / "web" / "static" / "icon.svg"
INDIGO = "rgb(67, 56, 202)"  # #4338ca, the inbox's --accent and theme-color


def mkdocs_config() -> dict[str, object]:
    class Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml may name Python objects (!!python/name:...): this test reads only plain keys
    Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    return dict(yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader))


def test_the_site_wears_the_inbox_icon_and_colour() -> None:
    theme = mkdocs_config()["theme"]
    assert isinstance(theme, dict)
    assert theme["logo"] == theme["favicon"] == "assets/logo.svg"
    assert (ROOT / "docs" / "assets" / "logo.svg").read_bytes() == INBOX_ICON.read_bytes()
    assert all(p["primary"] == "custom" for p in theme["palette"])
    assert "#4338ca" in (ROOT / "docs" / "assets" / "hitl.css").read_text()


def test_getting_started_comes_right_after_home() -> None:
    nav = mkdocs_config()["nav"]
    assert isinstance(nav, list)
    assert nav[:2] == [{"Home": "index.md"}, {"Getting started": "getting-started.md"}]
    assert "(getting-started.md)" in (ROOT / "docs" / "index.md").read_text()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The site built into a temporary folder (``mkdocs build --strict``), served on loopback."""
    folder = tmp_path_factory.mktemp("site")
    subprocess.run(
        [PYTHON, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(folder)],
        cwd=ROOT,
        check=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def pages() -> list[str]:
    """Every page's address in the site, from the docs' Markdown files."""
    found = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        name = path.relative_to(ROOT / "docs").with_suffix("").as_posix()
        found.append("/" if name == "index" else f"/{name.removesuffix('/index')}/")
    return found


@contextlib.asynccontextmanager
async def page_at(browser: Browser, width: int) -> AsyncIterator[shared.Page]:
    context = await browser.new_context(viewport={"width": width, "height": 900})
    try:
        yield await context.new_page()
    finally:
        await context.close()


CLIPPED = """() => [...document.querySelectorAll('.md-typeset__scrollwrap')]
    .filter((wrap) => wrap.scrollWidth > wrap.clientWidth + 1)
    .map((wrap) => wrap.querySelector('th') ? wrap.querySelector('th').textContent : '?')"""

# Each code block's copy button against the text of its block: at the block's left and its right
# (scrolled to the end), no text of the code may lie under the button.
COVERED = """async () => {
    const covered = [];
    for (const nav of document.querySelectorAll('pre > .md-code__nav')) {
        const code = nav.parentElement.querySelector(':scope > code');
        for (const left of [0, code.scrollWidth]) {
            code.scrollLeft = left;
            await new Promise((done) => requestAnimationFrame(done));
            const button = nav.getBoundingClientRect();
            const range = document.createRange();
            range.selectNodeContents(code);
            for (const line of range.getClientRects()) {
                const visible = line.width > 0 && line.right > code.getBoundingClientRect().left;
                if (visible && line.left < button.right && line.right > button.left
                        && line.top < button.bottom && line.bottom > button.top) {
                    covered.push(code.textContent.split('\\n')[0].slice(0, 60));
                    break;
                }
            }
        }
        code.scrollLeft = 0;
    }
    return [...new Set(covered)];
}"""


async def test_no_table_is_clipped_at_1280_px(site: str, browser: Browser) -> None:
    """The comparison table (and the hosts' table) scrolled sideways in the column left between the
    navigation and the page's contents: now the contents are in the navigation's column."""
    async with page_at(browser, 1280) as page:
        clipped = {}
        for path in pages():
            await page.goto(site + path)
            found = await page.evaluate(CLIPPED)
            if found:
                clipped[path] = found
        assert clipped == {}
        await page.goto(f"{site}/comparison/")
        header = await page.evaluate("getComputedStyle(document.querySelector('.md-header')).backgroundColor")
        assert header == INDIGO


@pytest.mark.parametrize("width", [1280, 375])
async def test_copy_buttons_cover_no_code(site: str, browser: Browser, width: int) -> None:
    async with page_at(browser, width) as page:
        covered, buttons = {}, 0
        for path in pages():
            await page.goto(site + path)
            await page.wait_for_load_state("load")
            buttons += await page.locator("pre > .md-code__nav").count()
            found = await page.evaluate(COVERED)
            if found:
                covered[path] = found
        assert buttons > 50  # the copy buttons are there to check
        assert covered == {}
