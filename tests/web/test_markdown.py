"""The playground's Markdown renderer (``iobridge/web/markdown.js``), run by Node.

The tree it builds holds only the renderer's own tags and attributes; the text of the
source stays text. (``test_markdown_injection.py`` checks the DOM it builds in Chromium.)
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from importlib.resources import files

import pytest

BASE = "http://127.0.0.1:8000/playground?thread=t1"
RENDER = """
import { renderMarkdown, safeHref } from %s;
let input = "";
for await (const chunk of process.stdin) input += chunk;
const { sources, hrefs, base } = JSON.parse(input);
console.log(JSON.stringify({
  html: sources.map((s) => renderMarkdown(s, base)),
  hrefs: hrefs.map((h) => safeHref(h, base)),
}));
"""


def _node(sources: list[str], hrefs: list[str]) -> dict[str, list[str | None]]:
    node = shutil.which("node")
    if node is None:
        if os.environ.get("CI") == "true":
            pytest.fail("node is not installed")
        pytest.skip("node is not installed")
    module = files("iobridge.web").joinpath("markdown.js")
    script = RENDER % json.dumps(f"file://{module}")
    done = subprocess.run(
        [node, "--input-type=module", "-e", script],
        input=json.dumps({"sources": sources, "hrefs": hrefs, "base": BASE}),
        capture_output=True, text=True, timeout=30, check=True,
    )
    result: dict[str, list[str | None]] = json.loads(done.stdout)
    return result


def render(*sources: str) -> list[str]:
    return [html or "" for html in _node(list(sources), [])["html"]]


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
        "<code>x &lt; y</code>.<br>Next line.</p>"
    )
    assert lists == (
        "<ul><li>a</li><li>b<ul><li>c</li></ul></li></ul>\n"
        '<ol start="3"><li>three</li><li>four</li></ol>'
    )
    assert code == "<pre><code>print(&#39;&lt;hi&gt;&#39;)</code></pre>"
    assert table == (
        "<table><thead><tr><th>a</th><th>b</th></tr></thead>"
        "<tbody><tr><td>1</td><td><strong>2</strong></td></tr></tbody></table>"
    )
    assert quote == "<blockquote><p>quoted</p></blockquote>\n<hr>"


def test_emphasis_nests_inside_links_and_other_emphasis() -> None:
    (html,) = render("**bold [link `code`](https://a.example/p) _em_** and ~~*both*~~")
    assert html == (
        '<p><strong>bold <a href="https://a.example/p" target="_blank" '
        'rel="noopener noreferrer">link <code>code</code></a> <em>em</em></strong> and '
        "<del><em>both</em></del></p>"
    )


def test_arithmetic_and_identifiers_are_not_emphasis() -> None:
    assert render("2 * 3 * 4 and snake_case_name") == ["<p>2 * 3 * 4 and snake_case_name</p>"]


def test_links_allow_only_http_and_same_origin_targets() -> None:
    (html,) = render(
        "[ok](https://example.com/?a=1&b=2) [js](javascript:alert(1)) [data](data:text/html,x) "
        "[mail](mailto:a@example.com) ![img](https://example.com/i.png) [here](/docs) "
        "[sneaky](/\\evil.example/x) [proto](//evil.example/x) see https://example.com/x_y."
    )
    anchor = '<a href="{}" target="_blank" rel="noopener noreferrer">{}</a>'
    assert html == (
        "<p>"
        + anchor.format("https://example.com/?a=1&amp;b=2", "ok")
        + " js data mail "
        + anchor.format("https://example.com/i.png", "img")
        + " "
        + anchor.format("http://127.0.0.1:8000/docs", "here")
        + " sneaky proto see "
        + anchor.format("https://example.com/x_y", "https://example.com/x_y")
        + ".</p>"
    )


@pytest.mark.parametrize(
    ("target", "href"),
    [
        ("https://example.com/a", "https://example.com/a"),
        ("HTTP://Example.com", "http://example.com/"),
        ("https:example.com", "https://example.com/"),  # an absolute URL, parsed as one
        ("/docs?q=1#x", "http://127.0.0.1:8000/docs?q=1#x"),
        ("#section", "http://127.0.0.1:8000/playground?thread=t1#section"),
        ("relative/path", "http://127.0.0.1:8000/relative/path"),
        ("/\\evil.example/x", None),  # a browser reads this as //evil.example/x
        ("\\\\evil.example/x", None),
        ("//evil.example/x", None),
        ("/\t/evil.example", None),
        ("javascript:alert(1)", None),
        (" JaVaScRiPt:alert(1)", None),
        ("java\nscript:alert(1)", None),
        ("data:text/html,<b>x</b>", None),
        ("vbscript:x", None),
        ("mailto:a@example.com", None),
        ("ftp://example.com/", None),
        ("http://[::1", None),
        ("", None),
    ],
)
def test_safe_href_decides_on_the_parsed_url(target: str, href: str | None) -> None:
    assert _node([], [target])["hrefs"] == [href]


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
        # The hole of the string renderer: a bare URL swallowed the link that followed it.
        "see https://x.example/[a](https://b.example/onmouseover=alert(1)//) end",
        "https://x.example/`code` and https://x.example/**b**",
    ],
)
def test_hostile_html_is_escaped(source: str) -> None:
    (html,) = render(source)
    allowed = {"p", "br", "code", "pre", "strong", "em", "table", "thead", "tbody", "tr",
               "th", "td", "a"}
    for tag, attributes in re.findall(r"<(/?[a-zA-Z0-9]+)([^>]*)>", html):
        assert tag.strip("/").lower() in allowed, html
        names = re.findall(r'\s([^\s=]+)="[^"]*"', attributes)
        assert set(names) <= {"href", "target", "rel"}, html
        assert re.fullmatch(r'(\s[a-z]+="[^"<>]*")*', attributes), html


def test_deep_nesting_is_bounded() -> None:
    (html,) = render("> " * 50 + "deep")
    assert html.count("<blockquote>") == 9
    assert html.endswith("</blockquote>" * 9)
