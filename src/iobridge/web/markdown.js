// A small Markdown renderer for the playground (no dependencies, no build step).
//
// Safe by construction: the parser builds a tree of plain objects whose tags and attribute
// names come only from this file (ALLOWED below); the text of a message only ever becomes
// text nodes (renderInto uses createElement and text nodes, never innerHTML) or, once URL
// parsing accepts it, the href of a link. A link is an absolute http(s) URL, or a path that
// resolves to the page's own origin; anything else (javascript:, data:, //host, /\host ...)
// stays text. Images render as links: the page never loads a URL from a message.
//
// Subset: ATX headings, fenced code, lists (nested by indentation), blockquotes, GFM tables,
// rules, paragraphs whose single newlines are kept as line breaks, inline code, bold,
// italic, strikethrough, links and bare URLs.

const MAX_DEPTH = 8;
const LIST = /^( {0,12})([-*+]|\d{1,9}[.)])( +|$)/;
const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
// Inline constructions. A pending construction is held in the line as a marker
// "\u0000<n>\u0000" (the source's own U+0000 become U+FFFD first); no URL may contain one.
const CODE_SPAN = /(`+)([\s\S]*?[^`])\1(?!`)/g;
const LINK = /!?\[([^\]\n]*)\]\(([^()\s\u0000]*(?:\([^()\s\u0000]*\))?[^()\s\u0000]*)(?:\s+"[^"]*")?\)/g;
const BARE_URL = /\bhttps?:\/\/[^\s<>"'`\u0000]*[^\s<>"'`.,:;!?)\]\u0000]/g;
const MARKER = /\u0000(\d+)\u0000/;

/** Every element the renderer writes, with the only attributes it may carry. */
export const ALLOWED = Object.freeze({
  p: [], br: [], h1: [], h2: [], h3: [], h4: [], h5: [], h6: [], strong: [], em: [], del: [],
  code: [], pre: [], blockquote: [], ul: [], ol: ["start"], li: [], hr: [], table: [],
  thead: [], tbody: [], tr: [], th: [], td: [], a: ["href", "target", "rel"],
});

const node = (tag, children = [], attrs = undefined) => ({ tag, children, attrs });

/**
 * The href for a link's target, or null: an absolute http(s) URL, or a relative reference
 * that resolves (against ``base``) to ``base``'s own origin. Decided on the parsed URL, so
 * "/\\evil.example" (which a browser reads as //evil.example) is refused.
 */
export function safeHref(target, base) {
  const text = String(target).trim();
  if (!text) return null;
  const web = (url) => url.protocol === "http:" || url.protocol === "https:";
  let absolute = null;
  try {
    absolute = new URL(text);
  } catch { /* relative: resolved below */ }
  if (absolute) return web(absolute) ? absolute.href : null;
  try {
    const page = new URL(base);
    const resolved = new URL(text, page);
    return web(resolved) && resolved.origin === page.origin ? resolved.href : null;
  } catch {
    return null;
  }
}

/** The tree for a Markdown text: ``{tag, children, attrs}`` objects and strings (text). */
export function parseMarkdown(source, base) {
  const text = String(source ?? "").replace(/\r\n?/g, "\n").replace(/\u0000/g, "\uFFFD");
  return blocks(text.split("\n"), 0, String(base));
}

/** Render a Markdown text into ``target`` (its children are replaced). */
export function renderInto(target, source, base = target.ownerDocument.baseURI) {
  const doc = target.ownerDocument;
  target.replaceChildren(...parseMarkdown(source, base).map((n) => toDom(doc, n)));
}

/** The HTML a tree stands for (for tests and tools; the page builds DOM with renderInto). */
export function renderMarkdown(source, base = "http://localhost/") {
  return parseMarkdown(source, base).map(toHtml).join("\n");
}

function checked(tree) {
  const names = ALLOWED[tree.tag];
  if (!names) throw new Error(`markdown: no such element ${tree.tag}`);
  const attrs = Object.entries(tree.attrs ?? {});
  for (const [name] of attrs) {
    if (!names.includes(name)) throw new Error(`markdown: no attribute ${name} on ${tree.tag}`);
  }
  return attrs;
}

function toDom(doc, tree) {
  if (typeof tree === "string") return doc.createTextNode(tree);
  const attrs = checked(tree);
  const element = doc.createElement(tree.tag);
  for (const [name, value] of attrs) element.setAttribute(name, String(value));
  for (const child of tree.children) element.append(toDom(doc, child));
  return element;
}

export function escapeHtml(text) {
  return String(text)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

function toHtml(tree) {
  if (typeof tree === "string") return escapeHtml(tree);
  const attrs = checked(tree).map(([name, value]) => ` ${name}="${escapeHtml(value)}"`).join("");
  if (tree.tag === "br" || tree.tag === "hr") return `<${tree.tag}${attrs}>`;
  return `<${tree.tag}${attrs}>${tree.children.map(toHtml).join("")}</${tree.tag}>`;
}

// ---------------------------------------------------------------- blocks

function indentOf(line) {
  return line.length - line.trimStart().length;
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)
    || LIST.test(line);
}

/** Lines as one paragraph's inline content, a line break between each. */
function lines(texts, base) {
  return texts.flatMap((text, i) => (i ? [node("br"), ...inline(text, base)] : inline(text, base)));
}

function blocks(source, depth, base) {
  if (depth > MAX_DEPTH) return [node("p", lines(source, base))];
  const out = [];
  let i = 0;
  while (i < source.length) {
    const line = source[i];
    let match;
    if (!line.trim()) {
      i += 1;
    } else if ((match = FENCE.exec(line))) {
      const fence = match[1];
      const body = [];
      for (i += 1; i < source.length && !source[i].trim().startsWith(fence); i += 1) {
        body.push(source[i]);
      }
      i += 1;
      out.push(node("pre", [node("code", [body.join("\n")])]));
    } else if (RULE.test(line)) {
      out.push(node("hr"));
      i += 1;
    } else if ((match = HEADING.exec(line))) {
      out.push(node(`h${match[1].length}`, inline(match[2] ?? "", base)));
      i += 1;
    } else if (QUOTE.test(line)) {
      const inner = [];
      for (; i < source.length && QUOTE.test(source[i]); i += 1) {
        inner.push(source[i].replace(QUOTE, ""));
      }
      out.push(node("blockquote", blocks(inner, depth + 1, base)));
    } else if (LIST.test(line)) {
      i = list(source, i, depth, base, out);
    } else if (line.includes("|") && i + 1 < source.length && TABLE_RULE.test(source[i + 1])
               && source[i + 1].includes("-")) {
      i = table(source, i, base, out);
    } else {
      const para = [];
      for (; i < source.length && source[i].trim() && (para.length === 0 || !startsBlock(source[i]));
           i += 1) {
        para.push(source[i].trim());
      }
      out.push(node("p", lines(para, base)));
    }
  }
  return out;
}

function list(source, i, depth, base, out) {
  const first = LIST.exec(source[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const items = [];
  let loose = false;
  while (i < source.length) {
    const marker = LIST.exec(source[i]);
    if (!marker || marker[1].length !== indent || /\d/.test(marker[2]) !== ordered) break;
    const width = marker[0].length;
    const content = [source[i].slice(width)];
    for (i += 1; i < source.length; i += 1) {
      const line = source[i];
      if (!line.trim()) {
        let next = i + 1;
        while (next < source.length && !source[next].trim()) next += 1;
        if (next < source.length && indentOf(source[next]) > indent) {
          content.push("");
          loose = true;
          continue;
        }
        break;
      }
      const lead = indentOf(line);
      if (lead > indent) {
        content.push(line.slice(Math.min(lead, width)));
      } else if (LIST.test(line) || startsBlock(line)) {
        break;
      } else {
        content.push(line.trim());
      }
    }
    items.push(content);
  }
  const start = ordered ? parseInt(first[2], 10) : 1;
  const children = items.map((content) => {
    const inner = blocks(content, depth + 1, base);
    // A tight list item holds its first paragraph's text directly.
    if (!loose && inner[0]?.tag === "p") inner.splice(0, 1, ...inner[0].children);
    return node("li", inner);
  });
  out.push(node(ordered ? "ol" : "ul", children, start !== 1 ? { start } : undefined));
  return i;
}

function cells(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
  return row.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, "|"));
}

function table(source, i, base, out) {
  const head = cells(source[i]);
  const rows = [];
  for (i += 2; i < source.length && source[i].trim() && source[i].includes("|"); i += 1) {
    rows.push(cells(source[i]));
  }
  const row = (values, tag) => node("tr", head.map((_, k) => node(tag, inline(values[k] ?? "", base))));
  out.push(node("table", [node("thead", [row(head, "th")]), node("tbody", rows.map((r) => row(r, "td")))]));
  return i;
}

// ---------------------------------------------------------------- inline

/** The inline content of one line of text, as nodes. */
function inline(text, base) {
  const held = [];
  const hold = (nodes) => `\u0000${held.push(nodes) - 1}\u0000`;
  const expand = (marked) => marked.split(MARKER).flatMap(
    (part, k) => (k % 2 ? held[Number(part)] ?? [] : part ? [part] : []),
  );
  // Each span's inside gets the other kinds of emphasis too (bold around italic, ...).
  const span = (tag, inner) => hold([node(tag, expand(emphasis(inner)))]);
  const emphasis = (marked) => marked
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, (_, inner) => span("strong", inner))
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, (_, lead, inner) => lead + span("strong", inner))
    .replace(/\*(?=[^\s*])([^*]*?[^\s*])\*/g, (_, inner) => span("em", inner))
    .replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, (_, lead, inner) => lead + span("em", inner))
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, (_, inner) => span("del", inner));
  const link = (label, target) => {
    const href = safeHref(target, base);
    if (href === null) return label;
    return [node("a", label, { href, target: "_blank", rel: "noopener noreferrer" })];
  };
  const rest = String(text).replace(/\u0000/g, "\uFFFD")
    .replace(CODE_SPAN, (_, ticks, code) => hold([node("code", [code.trim() || code])]))
    .replace(LINK, (_, label, target) => hold(
      link(label ? expand(emphasis(label)) : [target], target)))
    .replace(BARE_URL, (url) => hold(link([url], url)));
  return expand(emphasis(rest));
}
