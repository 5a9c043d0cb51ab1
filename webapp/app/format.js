// Small formatting and DOM helpers shared by the tabs (text only: never HTML).
export function bytes(n) {
  if (!Number.isFinite(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let u = 0;
  while (n >= 1024 && u < units.length - 1) n /= 1024, u++;
  return (u ? n.toFixed(n < 10 ? 2 : 1) : String(n)) + " " + units[u];
}

export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

// A two-column grid of label/value pairs.
export function fillGrid(grid, pairs) {
  grid.replaceChildren();
  for (const [k, v] of pairs) grid.append(el("div", "k", k), el("div", "v", v));
}
