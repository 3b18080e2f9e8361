// The copy button sits over the top right of a code block: where a line of the block reaches under
// it (a long command), the block gets a strip of its own at the top, so that the button covers no text.
(function () {
  function roomForButtons() {
    for (const nav of document.querySelectorAll("pre > .md-code__nav")) {
      const pre = nav.parentElement;
      const code = pre.querySelector(":scope > code");
      if (!code) continue;
      code.style.paddingTop = "";
      const buttons = nav.getBoundingClientRect();
      const box = code.getBoundingClientRect();
      const range = document.createRange();
      range.selectNodeContents(code);
      // a line under the buttons, long enough to reach them at some scroll position
      const covered = [...range.getClientRects()].some(
        (line) =>
          line.width > 0 &&
          line.top < buttons.bottom &&
          line.right - box.left + code.scrollLeft > buttons.left - box.left - 4
      );
      if (covered) {
        const below = buttons.bottom - box.top + 4;
        code.style.paddingTop = `${Math.ceil(below)}px`;
      }
    }
  }
  let pending = 0;
  function soon() {
    cancelAnimationFrame(pending);
    pending = requestAnimationFrame(roomForButtons);
  }
  if (typeof document$ !== "undefined") document$.subscribe(() => setTimeout(soon, 0));
  window.addEventListener("load", soon);
  window.addEventListener("resize", soon);
})();
