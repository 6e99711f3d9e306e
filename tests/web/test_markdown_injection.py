"""No attribute, element or handler from a message reaches the playground's DOM.

Every construction the renderer supports is filled with every entry of an injection corpus
and rendered in real Chromium with the page's Content-Security-Policy header removed (so a
handler that got through would run). The DOM must hold only the renderer's elements and
attributes, every href must be an http(s) URL written as one or a same-origin path, and no
handler may fire. Once through the renderer directly, once through the chat (a live run
and the thread's history).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import expect

from iobridge.agents.base import Agent
from iobridge.agents.context import RunContext
from iobridge.agents.outputs import AgentOutput

#: ``{p}`` is replaced by each payload.
CONSTRUCTIONS = [
    "{p}",
    "**{p}**", "__{p}__", "*{p}*", "_{p}_", "~~{p}~~", "***{p}***",
    "`{p}`", "``{p}``", "```\n{p}\n```", "```{p}\ncode\n```", "~~~\n{p}\n~~~",
    "[{p}](https://example.com/)", "[x]({p})", "[{p}]({p})", '[x](https://example.com/ "{p}")',
    "![{p}]({p})", "![x](https://example.com/{p})",
    "https://example.com/{p}", "https://example.com/[{p}](https://b.example/{p})",
    "https://example.com/`{p}`", "see https://example.com/?q={p}.",
    "# {p}", "###### {p} ###", "- {p}\n- b", "3. {p}\n4. x", "- a\n  - {p}\n    1. {p}",
    "| {p} | b |\n|---|---|\n| {p} | **{p}** |", "> {p}", "> > {p}\n> back",
    "> - **[`{p}`]({p})**", "- > {p}\n  > [a](https://example.com/{p})",
    "# **{p}** _{p}_ [{p}](https://example.com/{p})", "{p}\n\n---\n\n{p}",
    "line {p}\nnext {p}",
]
PAYLOADS = [
    "<img src=x onerror=\"window.__xss('img')\">",
    "\"><svg onload=window.__xss('svg')>",
    "' onmouseover='window.__xss(\"sq\")' x='",
    "\" onmouseover=\"window.__xss('dq')\" x=\"",
    "\" autofocus onfocus=\"window.__xss('focus')",
    "javascript:window.__xss('js')",
    " JaVaScRiPt:window.__xss('js2')",
    "java&#x09;script:window.__xss('entity')",
    "data:text/html,<script>window.__xss('data')</script>",
    "vbscript:window.__xss('vb')",
    "/\\evil.example/x",
    "//evil.example/x",
    "\\\\evil.example/x",
    "<a href=\"javascript:window.__xss('a')\">a</a>",
    "<iframe srcdoc=\"<script>parent.__xss('iframe')</script>\"></iframe>",
    "<style>body{background:url(javascript:window.__xss('css'))}</style>",
    "<math><mi xlink:href=\"javascript:window.__xss('math')\">m</mi></math>",
    "x\" style=\"background:url(javascript:window.__xss('style'))",
    "&lt;img src=x onerror=window.__xss('ent')&gt;",
    "</code></pre><script>window.__xss('pre')</script>",
    "<!-- ]]> --><svg/onload=window.__xss('comment')>",
    "`](javascript:window.__xss('tick'))`",
    "\u0000" + "0\u0000\u00001\u0000",
    "\u2028\u2029\u202e<b onclick=window.__xss('rtl')>",
    "[inner](https://b.example/\" onmouseover=\"window.__xss('inner')\")",
]
ALLOWED = {
    "P": set(), "BR": set(), "H1": set(), "H2": set(), "H3": set(), "H4": set(), "H5": set(),
    "H6": set(), "STRONG": set(), "EM": set(), "DEL": set(), "CODE": set(), "PRE": set(),
    "BLOCKQUOTE": set(), "UL": set(), "OL": {"start"}, "LI": set(), "HR": set(),
    "TABLE": set(), "THEAD": set(), "TBODY": set(), "TR": set(), "TH": set(), "TD": set(),
    "A": {"href", "target", "rel"},
}
#: Hosts the corpus writes as absolute http(s) URLs: the only other hosts a link may name.
WRITTEN_HOSTS = {"example.com", "b.example"}

# The page's policy removed (a handler that got through would run) and a trap for one.
NO_CSP_TRAP = "window.__hits = []; window.__xss = (what) => window.__hits.push(what);"

# Everything each element of each root carries, after every handler event a user or the page
# could fire has been fired at it.
SNAPSHOT_AND_PROVOKE = """
async (roots) => {
    roots = Array.isArray(roots) ? roots : [roots];
    const snapshots = roots.map((root) => [...root.querySelectorAll("*")].map((e) => ({
        tag: e.tagName, attrs: e.getAttributeNames().map((n) => [n, e.getAttribute(n)]),
    })));
    // Links are not followed (the target would open), but every event still fires.
    document.addEventListener("click", (ev) => ev.preventDefault(), { capture: true });
    for (const root of roots) {
        for (const e of root.querySelectorAll("*")) {
            for (const type of ["mouseover", "mouseenter", "focus", "click", "animationstart"]) {
                e.dispatchEvent(new Event(type, { bubbles: true }));
            }
        }
    }
    await new Promise((r) => setTimeout(r, 300));  // image errors, load events
    return snapshots.map((elements) => ({ elements, hits: window.__hits }));
}
"""


def _corpus() -> list[str]:
    return [c.replace("{p}", p) for c in CONSTRUCTIONS for p in PAYLOADS]


def _without_csp(route: Any) -> None:
    response = route.fetch()
    headers = {k: v for k, v in response.headers.items()
               if k.lower() != "content-security-policy"}
    route.fulfill(response=response, headers=headers)


def _open_without_csp(page: Any, url: str, path: str = "/playground") -> None:
    page.route("**/playground**", _without_csp)
    page.add_init_script(NO_CSP_TRAP)
    page.goto(f"{url}{path}")
    expect(page.locator("#send")).to_be_enabled()
    policy = page.evaluate(
        "fetch('/playground').then((r) => r.headers.get('content-security-policy'))"
    )
    assert policy is None  # the header really is gone for the page


def _check(snapshot: dict[str, Any], origin: str, where: str) -> None:
    assert snapshot["hits"] == [], f"{where}: handlers ran: {snapshot['hits']}"
    for element in snapshot["elements"]:
        tag = element["tag"]
        assert tag in ALLOWED, f"{where}: element {tag} reached the DOM"
        names = {name for name, _ in element["attrs"]}
        assert names <= ALLOWED[tag], f"{where}: {tag} has attributes {sorted(names)}"
        attrs = dict(element["attrs"])
        if tag == "A":
            assert attrs["target"] == "_blank" and attrs["rel"] == "noopener noreferrer"
            href = urlsplit(attrs["href"])
            assert href.scheme in ("http", "https"), f"{where}: href {attrs['href']}"
            assert (href.netloc == origin or href.hostname in WRITTEN_HOSTS), (
                f"{where}: a link to {attrs['href']}"
            )
        if tag == "OL" and "start" in attrs:
            assert attrs["start"].isdigit()


def test_no_construction_lets_an_attribute_or_element_through(serve: Any, page: Any) -> None:
    server = serve()
    _open_without_csp(page, server.url)
    origin = urlsplit(server.url).netloc
    corpus = _corpus()
    snapshots = page.evaluate(
        """async (sources) => {
            const { renderInto } = await import("/playground/markdown.js");
            const roots = sources.map((source) => {
                const root = document.createElement("div");
                document.body.append(root);
                renderInto(root, source);
                return root;
            });
            return (PROBE)(roots);
        }""".replace("PROBE", SNAPSHOT_AND_PROVOKE.strip()),
        corpus,
    )
    assert len(snapshots) == len(corpus) == len(CONSTRUCTIONS) * len(PAYLOADS)
    for source, snapshot in zip(corpus, snapshots, strict=True):
        _check(snapshot, origin, json.dumps(source))
    # The corpus does reach the constructions: links, lists, tables and code were built.
    built = {e["tag"] for s in snapshots for e in s["elements"]}
    assert {"A", "UL", "OL", "TABLE", "PRE", "CODE", "STRONG", "EM", "DEL", "H1", "H6",
            "BLOCKQUOTE", "HR", "BR"} <= built
    assert page.evaluate("window.__hits") == []


class CorpusAgent(Agent):
    """Replies with the whole corpus as one Markdown message, in chunks."""

    id = "corpus"
    name = "Corpus agent"

    async def run(self, ctx: RunContext) -> AsyncIterator[AgentOutput]:
        # Fences last: one whose payload holds a backtick is left open and takes the rest.
        text = "\n\n".join(sorted(_corpus(), key=lambda source: source.startswith(("```", "~~~"))))
        for start in range(0, len(text), 997):
            yield text[start : start + 997]


def test_the_chat_renders_the_corpus_without_injection(serve: Any, page: Any) -> None:
    """The whole path: streamed deltas into a bubble, then the same from the history."""
    server = serve(agents=[CorpusAgent()], default_agent="corpus")
    _open_without_csp(page, server.url)
    origin = urlsplit(server.url).netloc
    page.locator("#text").fill("the corpus please")
    page.locator("#text").press("Enter")
    expect(page.locator("#stop")).to_be_disabled()
    expect(page.locator("#send")).to_be_enabled()
    bubble = page.locator(".msg.assistant")
    expect(bubble).to_have_count(1)
    assert bubble.locator("a").count() > 50
    _check(bubble.evaluate(SNAPSHOT_AND_PROVOKE)[0], origin, "live run")

    thread = page.evaluate("new URL(location.href).searchParams.get('thread')")
    page.goto("about:blank")
    _open_without_csp(page, server.url, f"/playground?thread={thread}")
    bubble = page.locator(".msg.assistant")
    expect(bubble).to_have_count(1)
    _check(bubble.evaluate(SNAPSHOT_AND_PROVOKE)[0], origin, "history")
    assert page.errors == []
