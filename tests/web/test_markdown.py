"""The playground's Markdown renderer (``iobridge/web/markdown.js``), run by Node.

Everything from the source is escaped; only the renderer's own tags come out.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from importlib.resources import files

import pytest

RENDER = """
import { renderMarkdown } from %s;
let input = "";
for await (const chunk of process.stdin) input += chunk;
console.log(JSON.stringify(JSON.parse(input).map(renderMarkdown)));
"""


def render(*sources: str) -> list[str]:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is not installed")
        pytest.skip("node is not installed")
    module = files("iobridge.web").joinpath("markdown.js")
    script = RENDER % json.dumps(f"file://{module}")
    done = subprocess.run(
        [node, "--input-type=module", "-e", script],
        input=json.dumps(sources), capture_output=True, text=True, timeout=30, check=True,
    )
    result: list[str] = json.loads(done.stdout)
    return result


def test_blocks_and_inline_markup() -> None:
    heading, lists, code, table, quote = render(
        "# Title\nSome **bold**, *it*, ~~old~~ and `x < y`.\nNext line.",
        "- a\n- b\n  - c\n\n3. three\n4. four",
        "```python\nprint('<hi>')\n```",
        "| a | b |\n|---|---|\n| 1 | **2** |",
        "> quoted\n\n---",
    )
    assert heading == (
        "<h1>Title</h1>\n<p>Some <strong>bold</strong>, <em>it</em>, <del>old</del> and "
        "<code>x &lt; y</code>.<br>\nNext line.</p>"
    )
    assert lists == (
        "<ul>\n<li>a</li>\n<li>b\n<ul>\n<li>c</li>\n</ul></li>\n</ul>\n"
        '<ol start="3">\n<li>three</li>\n<li>four</li>\n</ol>'
    )
    assert code == (
        '<pre><code class="language-python">print(&#39;&lt;hi&gt;&#39;)</code></pre>'
    )
    assert table == (
        "<table><thead><tr><th>a</th><th>b</th></tr></thead>"
        "<tbody><tr><td>1</td><td><strong>2</strong></td></tr></tbody></table>"
    )
    assert quote == "<blockquote><p>quoted</p></blockquote>\n<hr>"


def test_arithmetic_and_identifiers_are_not_emphasis() -> None:
    assert render("2 * 3 * 4 and snake_case_name") == [
        "<p>2 * 3 * 4 and snake_case_name</p>"
    ]


def test_links_allow_only_safe_schemes() -> None:
    (html,) = render(
        "[ok](https://example.com/?a=1&b=2) [js](javascript:alert(1)) [data](data:text/html,x) "
        "![img](https://example.com/i.png) see https://example.com/x_y."
    )
    anchor = '<a href="{}" target="_blank" rel="noopener noreferrer">{}</a>'
    assert html == (
        "<p>"
        + anchor.format("https://example.com/?a=1&amp;b=2", "ok")
        + " js data "
        + anchor.format("https://example.com/i.png", "img")
        + " see "
        + anchor.format("https://example.com/x_y", "https://example.com/x_y")
        + ".</p>"
    )


@pytest.mark.parametrize(
    "source",
    [
        "<script>alert(1)</script>",
        '<img src=x onerror="alert(1)">',
        '[x](https://a" onmouseover="alert(1))',
        "`<b>` **<i>x</i>**",
        "| <b> | x |\n|---|---|\n| <svg onload=alert(1)> | y |",
        "```\n</code></pre><script>alert(1)</script>\n```",
        "\u0000" + "0\u0000 \u00001\u0000",
    ],
)
def test_hostile_html_is_escaped(source: str) -> None:
    (html,) = render(source)
    allowed = {"p", "br", "code", "pre", "strong", "em", "table", "thead", "tbody", "tr",
               "th", "td", "a"}
    for tag, attributes in re.findall(r"<(/?[a-zA-Z0-9]+)([^>]*)>", html):
        assert tag.strip("/").lower() in allowed, html
        names = set(re.findall(r"([a-zA-Z-]+)=", attributes))
        assert names <= {"href", "target", "rel", "class"}, html
        assert '"' not in re.sub(r'[a-z]+="[^"<>]*"', "", attributes), html


def test_deep_nesting_is_bounded() -> None:
    (html,) = render("> " * 50 + "deep")
    assert html.count("<blockquote>") == 9
    assert html.endswith("</blockquote>" * 9)
