// A small, safe Markdown renderer for the playground (no dependencies, no build step).
//
// Safety: the source is never inserted as HTML. Every piece of text is HTML-escaped, and the
// only markup in the output is what this file writes: p, br, h1-h6, strong, em, del, code,
// pre, blockquote, ul/ol/li, hr, table parts and a (http, https, mailto or same-site links
// only, opened in a new tab). Images render as links (the page never loads a URL from a
// message). Subset: ATX headings, fenced code, lists (nested by indentation), blockquotes,
// GFM tables, rules, paragraphs whose single newlines are kept as line breaks, inline code,
// bold, italic, strikethrough, links and bare URLs.

const MAX_DEPTH = 8;
const LIST = /^( {0,12})([-*+]|\d{1,9}[.)])( +|$)/;
const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)[^`]*$/;
const HEADING = /^ {0,3}(#{1,6})(?:\s+(.*?))?\s*#*\s*$/;
const RULE = /^ {0,3}([-*_])(?:\s*\1){2,}\s*$/;
const QUOTE = /^ {0,3}> ?/;
const TABLE_RULE = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
const SAFE_URL = /^(https?:\/\/|mailto:|\/(?!\/)|#)/i;

export function escapeHtml(text) {
  return String(text)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

/** The HTML for a Markdown text (a string; anything else is shown as its text). */
export function renderMarkdown(source) {
  const text = String(source ?? "").replace(/\r\n?/g, "\n").replace(/\u0000/g, "\uFFFD");
  return blocks(text.split("\n"), 0);
}

function indentOf(line) {
  return line.length - line.trimStart().length;
}

function startsBlock(line) {
  return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line)
    || LIST.test(line);
}

function blocks(lines, depth) {
  if (depth > MAX_DEPTH) return `<p>${lines.map(inline).join("<br>\n")}</p>`;
  const out = [];
  let i = 0;
  while (i < lines.length) {
    const line = lines[i];
    let match;
    if (!line.trim()) {
      i += 1;
    } else if ((match = FENCE.exec(line))) {
      const fence = match[1];
      const body = [];
      for (i += 1; i < lines.length && !lines[i].trim().startsWith(fence); i += 1) {
        body.push(lines[i]);
      }
      i += 1;
      const lang = match[2] ? ` class="language-${escapeHtml(match[2])}"` : "";
      out.push(`<pre><code${lang}>${escapeHtml(body.join("\n"))}</code></pre>`);
    } else if (RULE.test(line)) {
      out.push("<hr>");
      i += 1;
    } else if ((match = HEADING.exec(line))) {
      const level = match[1].length;
      out.push(`<h${level}>${inline(match[2] ?? "")}</h${level}>`);
      i += 1;
    } else if (QUOTE.test(line)) {
      const inner = [];
      for (; i < lines.length && QUOTE.test(lines[i]); i += 1) {
        inner.push(lines[i].replace(QUOTE, ""));
      }
      out.push(`<blockquote>${blocks(inner, depth + 1)}</blockquote>`);
    } else if (LIST.test(line)) {
      i = list(lines, i, depth, out);
    } else if (line.includes("|") && i + 1 < lines.length && TABLE_RULE.test(lines[i + 1])
               && lines[i + 1].includes("-")) {
      i = table(lines, i, out);
    } else {
      const para = [];
      for (; i < lines.length && lines[i].trim() && (para.length === 0 || !startsBlock(lines[i]));
           i += 1) {
        para.push(lines[i].trim());
      }
      out.push(`<p>${para.map(inline).join("<br>\n")}</p>`);
    }
  }
  return out.join("\n");
}

function list(lines, i, depth, out) {
  const first = LIST.exec(lines[i]);
  const indent = first[1].length;
  const ordered = /\d/.test(first[2]);
  const items = [];
  let loose = false;
  while (i < lines.length) {
    const marker = LIST.exec(lines[i]);
    if (!marker || marker[1].length !== indent || /\d/.test(marker[2]) !== ordered) break;
    const width = marker[0].length;
    const content = [lines[i].slice(width)];
    for (i += 1; i < lines.length; i += 1) {
      const line = lines[i];
      if (!line.trim()) {
        let next = i + 1;
        while (next < lines.length && !lines[next].trim()) next += 1;
        if (next < lines.length && indentOf(lines[next]) > indent) {
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
  const start = ordered && parseInt(first[2], 10) !== 1 ? ` start="${parseInt(first[2], 10)}"` : "";
  const tag = ordered ? "ol" : "ul";
  const html = items.map((content) => {
    let inner = blocks(content, depth + 1);
    if (!loose) inner = inner.replace(/^<p>([\s\S]*?)<\/p>/, "$1");
    return `<li>${inner}</li>`;
  });
  out.push(`<${tag}${start}>\n${html.join("\n")}\n</${tag}>`);
  return i;
}

function cells(line) {
  let row = line.trim();
  if (row.startsWith("|")) row = row.slice(1);
  if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
  return row.split(/(?<!\\)\|/).map((cell) => cell.trim().replace(/\\\|/g, "|"));
}

function table(lines, i, out) {
  const head = cells(lines[i]);
  const rows = [];
  for (i += 2; i < lines.length && lines[i].trim() && lines[i].includes("|"); i += 1) {
    rows.push(cells(lines[i]));
  }
  const row = (values, tag) =>
    `<tr>${head.map((_, k) => `<${tag}>${inline(values[k] ?? "")}</${tag}>`).join("")}</tr>`;
  out.push(`<table><thead>${row(head, "th")}</thead>`
    + `<tbody>${rows.map((r) => row(r, "td")).join("")}</tbody></table>`);
  return i;
}

function link(label, url) {
  const href = url.trim();
  if (!SAFE_URL.test(href)) return label;
  return `<a href="${escapeHtml(href)}" target="_blank" rel="noopener noreferrer">${label}</a>`;
}

/** Inline markup of one line of text. */
export function inline(text) {
  const stash = [];
  const keep = (html) => `\u0000${stash.push(html) - 1}\u0000`;
  let rest = String(text)
    .replace(/(`+)([\s\S]*?[^`])\1(?!`)/g, (_, ticks, code) => keep(`<code>${escapeHtml(code.trim() || code)}</code>`))
    .replace(/!?\[([^\]\n]*)\]\(([^()\s]*(?:\([^()\s]*\))?[^()\s]*)(?:\s+"[^"]*")?\)/g,
      (_, label, url) => keep(link(emphasis(escapeHtml(label)) || escapeHtml(url), url)))
    .replace(/\bhttps?:\/\/[^\s<>"'`]*[^\s<>"'`.,:;!?)\]]/g, (url) => keep(link(escapeHtml(url), url)));
  const restore = (html) => html.replace(/\u0000(\d+)\u0000/g, (_, n) => restore(stash[Number(n)]));
  return restore(emphasis(escapeHtml(rest)));
}

function emphasis(html) {
  return html
    .replace(/\*\*(?=\S)([\s\S]*?\S)\*\*/g, "<strong>$1</strong>")
    .replace(/(^|[^\w])__(?=\S)([\s\S]*?\S)__(?!\w)/g, "$1<strong>$2</strong>")
    .replace(/\*(?=[^\s*])([^*]*?[^\s*])\*/g, "<em>$1</em>")
    .replace(/(^|[^\w])_(?=[^\s_])([^_]*?[^\s_])_(?!\w)/g, "$1<em>$2</em>")
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, "<del>$1</del>");
}
