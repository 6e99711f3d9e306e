// Attachments: files picked, dropped or pasted into the composer become AG-UI 1.0 input parts
// (image, audio, video, or document, the bytes inline as base64). Before anything is read or
// sent they are held to what the agent declares it takes (``capabilities.multimodal.input``:
// only an explicit ``false`` refuses, undeclared is not unsupported) and to the server's
// limits from ``/playground/config.json``; the server checks both again (413, 400).

// Files on one message at most (the page's own bound; the server bounds bytes).
export const MAX_ATTACHMENTS = 16;
// What a run body carries besides its attachments, at most (ids, tools, props, text).
const BODY_OVERHEAD = 64 * 1024;
const KIND_NAMES = { image: "images", audio: "audio", video: "video", pdf: "PDFs", file: "files" };
const ACCEPT = { image: "image/*", audio: "audio/*", video: "video/*", pdf: "application/pdf" };

/** ``12 KiB``, ``2.5 MiB``: what a person reads. */
export function formatBytes(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KiB", "MiB", "GiB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${Number(value.toFixed(value < 10 ? 1 : 0))} ${units[unit]}`;
}

/** The ``multimodal.input`` modality a MIME type needs (as the server decides it). */
export function kindOf(mime) {
  const base = String(mime || "").split(";")[0].trim().toLowerCase();
  const major = base.split("/")[0];
  if (major === "image" || major === "audio" || major === "video") return major;
  return base === "application/pdf" ? "pdf" : "file";
}

function partType(kind) {
  return kind === "pdf" || kind === "file" ? "document" : kind;
}

function base64Of(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] ?? "");
    reader.onerror = () => reject(reader.error ?? new Error("the file could not be read"));
    reader.readAsDataURL(file);
  });
}

/** A blob: URL for a base64 image (the page's CSP shows blob: images, never data: ones). */
export function blobUrl(base64, mime) {
  const raw = atob(base64);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i += 1) bytes[i] = raw.charCodeAt(i);
  return URL.createObjectURL(new Blob([bytes], { type: mime }));
}

/** A media part as the page shows it: a thumbnail for an inline image, else its name. */
export function partPreview(part, element) {
  const source = part.source ?? {};
  const mime = source.mimeType || part.mimeType || "";
  const name = part.metadata?.filename || (source.type === "url" ? source.value : "")
    || `${part.type} ${mime}`.trim();
  const figure = element("figure", "attachment");
  if (part.type === "image" && source.type === "data" && typeof source.value === "string") {
    try {
      const img = element("img");
      img.src = blobUrl(source.value, mime || "image/*");
      img.alt = name;
      figure.append(img);
    } catch { /* not base64: the name alone */ }
  }
  figure.append(element("figcaption", "", name));
  return figure;
}

/** The composer's attachments: ``#attach``, ``#attach-input``, ``#attachments``, ``#attach-note``. */
export class Attachments {
  constructor({ element, onProblem }) {
    this.element = element;
    this.onProblem = onProblem;
    this.items = []; // {id, file, kind, url (image preview) | null, base64: Promise<string>}
    this.limits = {};
    this.accepted = {};
    this.agentName = "the agent";
    this.disabled = false;
  }

  /** The agent the next message goes to: what it takes shapes the picker. */
  setAgent(agent) {
    this.accepted = agent?.capabilities?.multimodal?.input ?? {};
    this.agentName = agent?.name || agent?.id || "the agent";
    this.render();
  }

  setLimits(limits) {
    this.limits = limits && typeof limits === "object" ? limits : {};
    this.render();
  }

  takes(kind) {
    return this.accepted[kind] !== false;
  }

  /** The modalities the agent takes, in the server's order (names for people). */
  takenNames() {
    return Object.keys(KIND_NAMES).filter((k) => this.takes(k)).map((k) => KIND_NAMES[k]);
  }

  get count() {
    return this.items.length;
  }

  bytes() {
    return this.items.reduce((sum, item) => sum + item.file.size, 0);
  }

  /** Add files; each one refused says why (kind, size, count), the rest are kept. */
  add(files) {
    const problems = [];
    const partMax = this.limits.maxMediaPartBytes;
    const messageMax = this.limits.maxMediaMessageBytes;
    for (const file of files) {
      const kind = kindOf(file.type);
      if (this.items.length >= MAX_ATTACHMENTS) {
        problems.push(`${file.name}: at most ${MAX_ATTACHMENTS} attachments on one message.`);
      } else if (!this.takes(kind)) {
        const taken = this.takenNames();
        problems.push(`${file.name}: ${this.agentName} does not take ${KIND_NAMES[kind]}`
          + ` (${taken.length ? `it takes ${taken.join(", ")}` : "it takes text only"}).`);
      } else if (partMax && file.size > partMax) {
        problems.push(`${file.name} is ${formatBytes(file.size)}: this server takes at most `
          + `${formatBytes(partMax)} per attachment.`);
      } else if (messageMax && this.bytes() + file.size > messageMax) {
        problems.push(`${file.name} (${formatBytes(file.size)}) would bring this message's `
          + `attachments over the server's ${formatBytes(messageMax)}.`);
      } else {
        const item = { id: crypto.randomUUID(), file, kind, url: null, base64: base64Of(file) };
        item.base64.catch(() => {}); // reported when sending
        if (kind === "image") item.url = URL.createObjectURL(file);
        this.items.push(item);
      }
    }
    this.render();
    this.onProblem(problems.join(" "));
    return problems;
  }

  remove(id) {
    const item = this.items.find((i) => i.id === id);
    if (item?.url) URL.revokeObjectURL(item.url);
    this.items = this.items.filter((i) => i.id !== id);
    this.render();
    this.onProblem("");
  }

  clear() {
    for (const item of this.items) if (item.url) URL.revokeObjectURL(item.url);
    this.items = [];
    this.render();
  }

  /** Why a message of ``text`` with these attachments cannot be sent, or ``""``. */
  refusal(text) {
    const max = this.limits.maxBodyBytes;
    if (!max || !this.items.length) return "";
    // base64 carries 3 bytes in 4 characters.
    const wire = Math.ceil(this.bytes() / 3) * 4 + new TextEncoder().encode(text).length
      + BODY_OVERHEAD;
    return wire > max
      ? `This message would be about ${formatBytes(wire)} on the wire; the server takes `
        + `requests of at most ${formatBytes(max)}. Remove an attachment.`
      : "";
  }

  /** The AG-UI input parts of the attachments (the files read as base64 now). */
  async parts() {
    return Promise.all(this.items.map(async (item) => ({
      type: partType(item.kind),
      source: { type: "data", value: await item.base64,
                mimeType: item.file.type || "application/octet-stream" },
      metadata: { filename: item.file.name },
    })));
  }

  setDisabled(disabled) {
    this.disabled = disabled;
    this.render();
  }

  /** The note with the limits, the picker's state, and one chip per attachment. */
  render() {
    const { element } = this;
    const button = document.getElementById("attach");
    const input = document.getElementById("attach-input");
    const taken = this.takenNames();
    const none = taken.length === 0;
    button.disabled = this.disabled || none;
    button.title = none ? `${this.agentName} takes text only` : `Attach ${taken.join(", ")}`;
    const accept = Object.keys(ACCEPT).filter((k) => this.takes(k)).map((k) => ACCEPT[k]);
    input.accept = this.takes("file") ? "" : accept.join(",");
    const limits = [];
    if (this.limits.maxMediaPartBytes) {
      limits.push(`up to ${formatBytes(this.limits.maxMediaPartBytes)} each`);
    }
    if (this.limits.maxMediaMessageBytes) {
      limits.push(`${formatBytes(this.limits.maxMediaMessageBytes)} per message`);
    }
    const note = document.getElementById("attach-note");
    note.textContent = none ? `${this.agentName} takes text only.`
      : `Attach or drop ${taken.join(", ")}${limits.length ? ` · ${limits.join(", ")}` : ""}`
        + (this.items.length ? ` · attached ${formatBytes(this.bytes())}` : "");
    const list = document.getElementById("attachments");
    list.replaceChildren(...this.items.map((item) => {
      const chip = element("li", "attachment");
      chip.dataset.kind = item.kind;
      if (item.url) {
        const img = element("img");
        img.src = item.url;
        img.alt = `Preview of ${item.file.name}`;
        chip.append(img);
      }
      chip.append(element("span", "name", item.file.name),
                  element("span", "muted", formatBytes(item.file.size)));
      const remove = element("button", "remove", "✕");
      remove.type = "button";
      remove.setAttribute("aria-label", `Remove ${item.file.name}`);
      remove.addEventListener("click", () => this.remove(item.id));
      chip.append(remove);
      return chip;
    }));
    list.hidden = this.items.length === 0;
  }
}
