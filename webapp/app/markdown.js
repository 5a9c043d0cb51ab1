// A small Markdown renderer for model output. It builds DOM nodes and sets only textContent, so no
// text from the model is ever parsed as HTML. Blocks: fenced code, headings, lists, quotes, paragraphs;
// inline: `code`, **bold**, *italic*, [links](http://...) (http and https only). An unclosed fence
// (a stream still arriving) renders as code so far.

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

const INLINE = /(`+)([\s\S]*?)\1|\*\*([^*\n]+)\*\*|__([^_\n]+)__|\*([^*\s][^*\n]*?)\*|\[([^\]\n]+)\]\(([^)\s]+)\)/g;

export function appendInline(parent, text) {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) parent.append(document.createTextNode(text.slice(last, m.index)));
    if (m[1] !== undefined) parent.append(el("code", "", m[2]));
    else if (m[3] !== undefined || m[4] !== undefined) appendInline(parent.appendChild(el("strong")), m[3] ?? m[4]);
    else if (m[5] !== undefined) appendInline(parent.appendChild(el("em")), m[5]);
    else if (/^https?:\/\//i.test(m[7])) {
      const a = el("a", "", m[6]);
      a.href = m[7];
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      parent.append(a);
    } else {
      parent.append(document.createTextNode(m[0]));  // not a web link: shown as written
    }
    last = m.index + m[0].length;
  }
  if (last < text.length) parent.append(document.createTextNode(text.slice(last)));
}

function paragraph(lines) {
  const p = el("p");
  lines.forEach((line, i) => {
    if (i) p.append(el("br"));
    appendInline(p, line);
  });
  return p;
}

// Returns a DocumentFragment for `source`.
export function renderMarkdown(source) {
  const out = document.createDocumentFragment();
  const lines = source.replace(/\r\n?/g, "\n").split("\n");
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) out.append(paragraph(para));
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```+|~~~+)\s*([\w+#.-]*)/);
    if (fence) {
      flush();
      const body = [];
      i++;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i++;  // the closing fence (or past the end)
      const pre = el("pre");
      if (fence[2]) pre.append(el("span", "lang", fence[2]));
      const code = el("code", fence[2] ? "language-" + fence[2] : "", body.join("\n"));
      pre.append(code);
      out.append(pre);
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      flush();
      const h = el("h" + Math.min(6, heading[1].length + 2));
      appendInline(h, heading[2]);
      out.append(h);
      i++;
      continue;
    }
    const item = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
    if (item) {
      flush();
      const ordered = /\d/.test(item[1]);
      const list = el(ordered ? "ol" : "ul");
      while (i < lines.length) {
        const m = lines[i].match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
        if (!m || /\d/.test(m[1]) !== ordered) break;
        const li = el("li");
        appendInline(li, m[2]);
        list.append(li);
        i++;
      }
      out.append(list);
      continue;
    }
    if (/^\s*>/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^\s*>/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
      const q = el("blockquote");
      q.append(renderMarkdown(quoted.join("\n")));
      out.append(q);
      continue;
    }
    if (line.trim() === "") flush();
    else para.push(line);
    i++;
  }
  flush();
  return out;
}
