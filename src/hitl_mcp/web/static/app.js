// hitl-mcp inbox: progressive enhancement. Every page works without this file; with it, forms are
// sent in place, the page follows /events live, times stay fresh, and the keyboard works.
(() => {
  "use strict";

  const body = document.body;
  const page = body.dataset.page;
  const signedIn = body.dataset.signedIn === "yes";
  const csrfMeta = document.querySelector('meta[name="csrf-token"]');
  const csrf = csrfMeta ? csrfMeta.content : "";
  const toasts = document.getElementById("toasts");
  const help = document.getElementById("help");
  const live = document.getElementById("live");
  const LIVE_PAGES = new Set(["inbox", "request", "history"]);

  // --- small helpers ----------------------------------------------------------------------

  const sayPolite = document.getElementById("say");
  const sayAlert = document.getElementById("say-alert");
  const TOAST_MS = 8000;

  // Screen readers hear a message once, from a live region; the toast is only what the eye sees.
  function say(message, assertive) {
    const region = assertive ? sayAlert : sayPolite;
    if (!region) return;
    const line = document.createElement("p");
    line.textContent = message;
    region.append(line);
    while (region.children.length > 3) region.firstElementChild.remove();
  }

  // A toast stays while the pointer or the focus is on it, and has a close button.
  function toast(message, tone) {
    say(message, false);
    if (!toasts) return;
    const item = document.createElement("div");
    item.className = "toast" + (tone ? " " + tone : "");
    const text = document.createElement("span");
    text.className = "toast-text";
    text.textContent = message;
    const close = document.createElement("button");
    close.type = "button";
    close.className = "toast-close";
    close.setAttribute("aria-label", "Close this message");
    close.innerHTML = '<span aria-hidden="true">×</span>';
    item.append(text, close);
    toasts.append(item);
    while (toasts.children.length > 3) toasts.firstElementChild.remove();
    let left = TOAST_MS;
    let started = Date.now();
    let timer = setTimeout(() => item.remove(), left);
    const pause = () => {
      if (timer === null) return;
      clearTimeout(timer);
      timer = null;
      left -= Date.now() - started;
    };
    const resume = () => {
      if (timer !== null || item.matches(":hover") || item.contains(document.activeElement)) return;
      started = Date.now();
      timer = setTimeout(() => item.remove(), Math.max(left, 2000));
    };
    item.addEventListener("pointerenter", pause);
    item.addEventListener("pointerleave", resume);
    item.addEventListener("focusin", pause);
    item.addEventListener("focusout", () => setTimeout(resume, 0));
    close.addEventListener("click", () => {
      clearTimeout(timer);
      item.remove();
    });
  }

  function setLive(state, text) {
    if (!live) return;
    live.dataset.state = state;
    const label = live.querySelector(".live-text");
    if (label) label.textContent = text;
    live.title = text;
  }

  // --- times ------------------------------------------------------------------------------

  function agoText(seconds) {
    if (seconds < 45) return "just now";
    const minutes = Math.round(seconds / 60);
    if (minutes < 60) return minutes + " min ago";
    const hours = Math.round(seconds / 3600);
    if (hours < 48) return hours + " h ago";
    return Math.round(seconds / 86400) + " d ago";
  }

  function leftText(seconds) {
    if (seconds <= 0) return "expiring";
    if (seconds < 60) return Math.floor(seconds) + " s left";
    const minutes = Math.round(seconds / 60);
    if (minutes < 60) return minutes + " min left";
    const hours = Math.floor(minutes / 60);
    const rest = minutes % 60;
    if (hours < 48) return rest ? `${hours} h ${String(rest).padStart(2, "0")} min left` : `${hours} h left`;
    return Math.round(seconds / 86400) + " d left";
  }

  function tick() {
    const now = Date.now();
    for (const el of document.querySelectorAll("time.ago[datetime]")) {
      const at = Date.parse(el.getAttribute("datetime"));
      if (Number.isNaN(at)) continue;
      el.textContent = agoText((now - at) / 1000);
      el.title = new Date(at).toLocaleString();
    }
    for (const el of document.querySelectorAll(".left[data-expires]")) {
      const at = Date.parse(el.dataset.expires);
      if (Number.isNaN(at)) continue;
      const seconds = (at - now) / 1000;
      el.textContent = leftText(seconds);
      el.classList.toggle("soon", seconds < 300);
      el.title = "Expires " + new Date(at).toLocaleString();
    }
  }

  // --- forms, sent in place ------------------------------------------------------------------

  const answeredHere = new Set();
  const confirmed = new WeakSet();

  function formError(form, message) {
    const box = form.closest("[data-answer]");
    const slot = box && box.querySelector(".form-error");
    if (slot) {
      slot.textContent = message;
      slot.hidden = false;
    } else {
      toast(message, "warn");
    }
    return slot;
  }

  function focusOn(el) {
    if (!el) return false;
    if (!el.matches("a[href], button, input, textarea, select, [tabindex]")) el.setAttribute("tabindex", "-1");
    el.focus({ preventScroll: true });
    el.scrollIntoView({ block: "nearest" });
    return true;
  }

  // A late answer: the request was settled elsewhere. The card leaves the list, but what happened
  // stays on the page, where the card was, until the person closes it.
  function pinLate(card, message) {
    const region = card && card.closest("[data-live]");
    if (!region) return;
    let box = document.getElementById("late");
    if (!box) {
      box = document.createElement("div");
      box.id = "late";
      box.className = "late";
      region.before(box);
    }
    const note = document.createElement("div");
    note.className = "card late-note";
    note.dataset.lateFor = card.dataset.id;
    const title = document.createElement("p");
    title.className = "late-title";
    title.textContent = "Your answer was not used: " + message;
    const what = document.createElement("p");
    const link = document.createElement("a");
    link.href = "/requests/" + encodeURIComponent(card.dataset.id);
    link.textContent = card.dataset.text || "the request";
    what.append("“", link, "”");
    const close = document.createElement("button");
    close.type = "button";
    close.className = "btn btn-quiet";
    close.textContent = "Close";
    close.addEventListener("click", () => {
      const next = note.nextElementSibling || note.previousElementSibling;
      note.remove();
      if (!focusOn(next && next.querySelector(".late-title"))) focusOn(document.querySelector("main h1"));
    });
    note.append(title, what, close);
    box.prepend(note);
    focusOn(title);
  }

  // Approving a high-risk request takes a second step, with the focus on Cancel.
  function confirmHigh(form, button) {
    const card = form.closest(".card[data-id]");
    const before = document.activeElement;
    const dialog = document.createElement("dialog");
    dialog.className = "help confirm";
    dialog.setAttribute("aria-labelledby", "confirm-title");
    dialog.setAttribute("aria-describedby", "confirm-text");
    const heading = document.createElement("h2");
    heading.id = "confirm-title";
    heading.textContent = "Approve this high-risk request?";
    const text = document.createElement("p");
    text.id = "confirm-text";
    text.className = "confirm-text";
    text.textContent = (card && card.dataset.text) || "";
    dialog.append(heading, text);
    const payload = card && card.querySelector(".payload pre");
    if (payload) {
      const copy = payload.cloneNode(true);
      copy.removeAttribute("aria-labelledby");
      copy.setAttribute("aria-label", "The payload you are approving");
      const box = document.createElement("div");
      box.className = "payload";
      box.append(copy);
      dialog.append(box);
    }
    const buttons = document.createElement("div");
    buttons.className = "buttons";
    const cancel = document.createElement("button");
    cancel.type = "button";
    cancel.className = "btn";
    cancel.textContent = "Cancel";
    const approve = document.createElement("button");
    approve.type = "button";
    approve.className = "btn btn-approve";
    approve.dataset.confirmApprove = "";
    approve.textContent = "Approve";
    const label = document.createElement("span");
    label.className = "sr-only";
    label.textContent = ` the high-risk request “${text.textContent}”`;
    approve.append(label);
    buttons.append(cancel, approve);
    dialog.append(buttons);
    let go = false;
    cancel.addEventListener("click", () => dialog.close());
    approve.addEventListener("click", () => {
      go = true;
      dialog.close();
    });
    dialog.addEventListener("close", () => {
      dialog.remove();
      if (go && document.contains(form)) {
        confirmed.add(form);
        form.requestSubmit(button);
      } else if (before && document.contains(before)) {
        before.focus({ preventScroll: true });
      }
    });
    document.body.append(dialog);
    dialog.showModal();
    cancel.focus();
  }

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.matches("form[data-enhance]")) return;
    event.preventDefault();
    if (form.dataset.busy) return;
    const submitter = event.submitter || null;
    if (submitter && submitter.dataset.confirm === "high" && !confirmed.has(form)) {
      confirmHigh(form, submitter);
      return;
    }
    const data = new URLSearchParams(new FormData(form, submitter));
    if (confirmed.has(form)) {
      confirmed.delete(form);
      data.set("confirm", "yes");
    }
    const buttons = form.querySelectorAll("button");
    form.dataset.busy = "1";
    buttons.forEach((b) => b.setAttribute("aria-busy", "true"));
    const card = form.closest(".card[data-id]");
    if (card) {
      // an answer disarms the keys: the selection is cleared, and action keys rest for a moment
      card.classList.add("sending");
      rest();
      clearSelection();
    }
    try {
      const response = await fetch(form.action, {
        method: "POST",
        body: data,
        credentials: "same-origin",
        headers: { Accept: "application/json", "X-CSRF-Token": csrf },
      });
      let reply = {};
      try {
        reply = await response.json();
      } catch (_) {
        reply = {};
      }
      if (response.ok) {
        if (card) {
          answeredHere.add(card.dataset.id);
          card.classList.add("leaving");
          rest();
        }
        const note = form.closest(".note");
        if (note) {
          const next = note.nextElementSibling || note.previousElementSibling;
          note.remove();
          if (!focusOn(next && next.querySelector("button.dismiss"))) focusOn(document.getElementById("feed-title"));
        }
        if (reply.message) toast(reply.message, "ok");
        else if (form.matches("[data-dismiss]")) toast("Dismissed", "ok");
        schedule(0);
      } else if (response.status === 409) {
        const message = reply.error || "Already answered elsewhere.";
        if (card) {
          answeredHere.add(card.dataset.id);
          pinLate(card, message);
        } else {
          toast(message, "warn");
        }
        schedule(0);
      } else if (response.status === 401) {
        toast("You are signed out: open the login link again.", "warn");
      } else {
        const slot = formError(form, reply.error || `Not sent (HTTP ${response.status}).`);
        if (!focusOn(form.querySelector("textarea"))) focusOn(slot);
      }
    } catch (_) {
      focusOn(formError(form, "Could not reach the server. Check the connection and try again."));
    } finally {
      if (card) card.classList.remove("sending");
      delete form.dataset.busy;
      buttons.forEach((b) => b.removeAttribute("aria-busy"));
    }
  });

  function grow(area) {
    area.style.height = "auto";
    area.style.height = Math.min(area.scrollHeight + 2, window.innerHeight * 0.4) + "px";
  }

  document.addEventListener("input", (event) => {
    const target = event.target;
    if (target instanceof HTMLTextAreaElement) grow(target);
  });

  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (target instanceof HTMLTextAreaElement && event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      const form = target.form;
      if (!form) return;
      const send = form.querySelector('button[data-action="send"]');
      if (send) form.requestSubmit(send);
    }
  });

  // --- live updates --------------------------------------------------------------------------

  const lastEvent = new Map();
  let refreshing = false;
  let again = false;
  let timer = null;

  function schedule(delay) {
    if (!LIVE_PAGES.has(page)) return;
    clearTimeout(timer);
    timer = setTimeout(refresh, delay === undefined ? 150 : delay);
  }

  async function refresh() {
    if (refreshing) {
      again = true;
      return;
    }
    refreshing = true;
    try {
      const response = await fetch(location.href, {
        credentials: "same-origin",
        cache: "no-store",
        headers: { Accept: "text/html", "X-Live": "1" },
      });
      if (response.status === 401) {
        setLive("off", "Signed out");
        return;
      }
      if (!response.ok) return;
      const doc = new DOMParser().parseFromString(await response.text(), "text/html");
      apply(doc);
    } catch (_) {
      // offline for a moment: the event stream reconnects and asks again
    } finally {
      refreshing = false;
      if (again) {
        again = false;
        schedule(0);
      }
    }
  }

  function pendingCards() {
    return Array.from(document.querySelectorAll("#pending-list .card[data-id]"));
  }

  // Swap in what the server now shows, keeping each element whose key is unchanged (so a reply
  // being typed, an open payload and the selection survive), and the focus where it was.
  function reconcile(region, fresh) {
    const imported = document.importNode(fresh, true);
    const active = document.activeElement;
    const focusInside = active && active !== document.body && region.contains(active);
    const selection =
      focusInside && "selectionStart" in active ? [active.selectionStart, active.selectionEnd] : null;
    for (const node of imported.querySelectorAll("[data-key]")) {
      const old = region.querySelector(`[data-key="${CSS.escape(node.dataset.key)}"]`);
      if (old) node.replaceWith(old);
    }
    region.replaceChildren(...Array.from(imported.childNodes));
    if (focusInside && document.contains(active) && document.activeElement !== active) {
      active.focus({ preventScroll: true });
      if (selection) {
        try {
          active.setSelectionRange(selection[0], selection[1]);
        } catch (_) {
          // not a text field
        }
      }
    }
  }

  function noteIds() {
    return new Set(Array.from(document.querySelectorAll("#notes .note[id]"), (note) => note.id));
  }

  // When what had the focus left the page (answered here or elsewhere), the focus goes to the next
  // request's heading, else to what the page now says; never back to <body>.
  function refocus(goneId, order) {
    const here = new Set(items().map((el) => el.dataset.id));
    const at = order.indexOf(goneId);
    const near = order
      .slice(at + 1)
      .concat(order.slice(0, Math.max(at, 0)).reverse())
      .find((id) => id !== goneId && here.has(id));
    const card = near && document.querySelector(`main .card[data-id="${CSS.escape(near)}"]`);
    const targets = [
      card && card.querySelector(".card-title"),
      document.querySelector("#request-view .outcome-line"),
      document.querySelector("#pending-list .card-title"),
      document.querySelector("#pending-list .empty-title"),
      document.querySelector("main h1"),
    ];
    targets.some((el) => focusOn(el));
  }

  function apply(doc) {
    const before = new Map(pendingCards().map((card) => [card.dataset.id, card.dataset.text]));
    const notesBefore = noteIds();
    const active = document.activeElement;
    const activeCard = active && active !== body ? active.closest("main .card[data-id]") : null;
    const activeNote = active && active !== body ? active.closest("#notes .note") : null;
    const order = items().map((el) => el.dataset.id);
    for (const region of document.querySelectorAll("[data-live][id]")) {
      const fresh = doc.getElementById(region.id);
      if (fresh) reconcile(region, fresh);
    }
    document.title = doc.title;
    for (const id of ["nav-count", "pending-pill"]) {
      const mine = document.getElementById(id);
      const theirs = doc.getElementById(id);
      if (!mine || !theirs) continue;
      mine.replaceChildren(...Array.from(document.importNode(theirs, true).childNodes));
      mine.hidden = theirs.hidden;
    }
    const after = pendingCards();
    const now = new Set(after.map((card) => card.dataset.id));
    for (const card of after) {
      if (!before.has(card.dataset.id)) {
        card.classList.add("fresh");
        announceNew(card);
      }
    }
    for (const [id, text] of before) {
      if (!now.has(id) && !answeredHere.has(id)) announceGone(id, text);
    }
    for (const note of document.querySelectorAll("#notes .note[id]")) {
      if (!notesBefore.has(note.id)) announceNote(note);
    }
    // the selection belongs to one request: when it leaves, nothing is selected
    paint();
    if (active && active !== body && !document.contains(active)) {
      if (activeCard) refocus(activeCard.dataset.id, order);
      else if (activeNote) focusOn(document.querySelector("#notes .note button.dismiss") || document.getElementById("feed-title"));
    }
    tick();
  }

  function announceNote(note) {
    const level = (/\blevel-(\w+)/.exec(note.className) || [])[1] || "info";
    const title = note.querySelector(".note-title");
    const textEl = note.querySelector(".note-body > p");
    const agentEl = note.querySelector(".note-head .meta");
    const agent = agentEl ? agentEl.textContent.split("·")[0].trim() : "an agent";
    const word = { error: "Error", warning: "Warning", success: "Done" }[level] || "Notification";
    const parts = [`${word} from ${agent}:`];
    if (title && title.textContent.trim().toLowerCase() !== level) parts.push(title.textContent.trim() + ".");
    if (textEl) parts.push(textEl.textContent.trim());
    say(parts.join(" "), level === "error");
  }

  // a request that left the inbox without being answered here: say what became of it
  async function announceGone(id, text) {
    let what = { answered: "was answered elsewhere", expired: "expired", cancelled: "was cancelled" }[
      lastEvent.get(id)
    ];
    try {
      const response = await fetch("/api/requests/" + encodeURIComponent(id), {
        credentials: "same-origin",
        headers: { Accept: "application/json" },
      });
      if (response.ok) {
        const request = await response.json();
        const outcome = request.outcome || {};
        if (request.status === "answered") {
          const verb = request.kind === "approval" ? (outcome.approved ? "was approved" : "was denied") : "was answered";
          what = `${verb} by ${outcome.responder} via ${outcome.channel}`;
        } else if (request.status === "expired") {
          what = "expired";
        } else if (request.status === "cancelled") {
          what = "was cancelled by the agent";
        }
      }
    } catch (_) {
      // keep what the event said
    }
    toast(`“${text}” ${what || "is no longer pending"}.`);
  }

  function announceNew(card) {
    const kind = card.dataset.kind === "approval" ? "Approval" : "Question";
    const agent = card.dataset.agent || "an agent";
    const text = card.dataset.text || "";
    toast(`New ${kind.toLowerCase()} from ${agent}: ${text}`);
    if (!("Notification" in window) || Notification.permission !== "granted") return;
    if (!document.hidden && document.hasFocus()) return;
    const title = `${kind} from ${agent}`;
    const options = {
      body: text,
      tag: "hitl-" + card.dataset.id,
      icon: "/static/icon-192.png",
      data: { url: "/requests/" + card.dataset.id },
    };
    const fallback = () => {
      try {
        const note = new Notification(title, options);
        note.onclick = () => {
          window.focus();
          location.href = options.data.url;
        };
      } catch (_) {
        // this browser only notifies through a service worker
      }
    };
    const workers = navigator.serviceWorker;
    if (workers && workers.controller) {
      workers.ready.then((reg) => reg.showNotification(title, options)).catch(fallback);
    } else {
      fallback();
    }
  }

  let source = null;
  let opened = false;

  function connect() {
    if (!window.EventSource || !LIVE_PAGES.has(page)) return;
    setLive("wait", "Connecting…");
    source = new EventSource("/events");
    source.addEventListener("hello", () => {
      setLive("on", "Live");
      if (opened) schedule(0); // back after a gap: events may have been missed
      opened = true;
    });
    source.addEventListener("change", (event) => {
      try {
        const data = JSON.parse(event.data);
        if (data.id) lastEvent.set(data.id, data.event);
      } catch (_) {
        // a malformed event still means something changed
      }
      schedule();
    });
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) {
        setLive("off", "Offline");
        setTimeout(connect, 5000);
      } else {
        setLive("wait", "Retrying…");
      }
    };
  }

  // --- system notifications ------------------------------------------------------------------

  const notifyButton = document.getElementById("enable-notify");
  if (notifyButton && "Notification" in window && Notification.permission === "default") {
    notifyButton.hidden = false;
    notifyButton.addEventListener("click", async () => {
      const permission = await Notification.requestPermission();
      notifyButton.hidden = permission !== "default";
      if (permission === "granted") toast("New requests will be announced while this tab is in the background.");
    });
  }

  // --- keyboard -----------------------------------------------------------------------------
  //
  // j/k select a request; a, d and the digits act only on that selected request, never on one the
  // person did not pick (no "only card" fallback). The selection is a request id: it clears when
  // that request leaves, and after every answer. Held keys (auto-repeat) do nothing, and the
  // action keys rest for a moment after an answer. A setting kept in this browser turns the
  // single-key shortcuts off or makes them need Alt+Shift (speech input types letters as keys).

  const QUIET_MS = 1000;
  const KEY_MODE = "hitl-keys";
  let quietUntil = 0;
  let selectedId = null;

  let restTimer = null;

  // the action keys rest (body[data-keys="resting"] while they do)
  function rest() {
    quietUntil = Date.now() + QUIET_MS;
    body.dataset.keys = "resting";
    clearTimeout(restTimer);
    restTimer = setTimeout(() => delete body.dataset.keys, QUIET_MS);
  }

  function keyMode() {
    try {
      const mode = localStorage.getItem(KEY_MODE);
      return mode === "off" || mode === "modifier" ? mode : "on";
    } catch (_) {
      return "on";
    }
  }

  for (const radio of document.querySelectorAll('input[name="key-mode"]')) {
    radio.checked = radio.value === keyMode();
    radio.addEventListener("change", () => {
      if (!radio.checked) return;
      try {
        localStorage.setItem(KEY_MODE, radio.value);
      } catch (_) {
        // storage refused: the choice lasts for this page only
      }
      toast({ on: "Single-key shortcuts are on.", modifier: "Shortcuts now need Alt+Shift.", off: "Single-key shortcuts are off." }[radio.value]);
    });
  }

  // The shortcut a key press means under the current setting, or null.
  function shortcut(event) {
    const mode = keyMode();
    if (mode === "off" || event.ctrlKey || event.metaKey) return null;
    if (event.key === "Enter" && !event.altKey && !event.shiftKey) return "Enter";
    if (mode === "on") return event.altKey ? null : event.key;
    if (!event.altKey || !event.shiftKey) return null;
    const code = /^(?:Key([A-Z])|Digit([0-9]))$/.exec(event.code || "");
    if (code) return code[1] ? code[1].toLowerCase() : code[2];
    return event.code === "Slash" ? "/" : null;
  }

  function items() {
    if (page === "history") return Array.from(document.querySelectorAll("#history-list .hist[data-id]"));
    return Array.from(document.querySelectorAll("main .card[data-id]:not(.leaving, .sending)"));
  }

  function selectedItem() {
    return selectedId ? items().find((el) => el.dataset.id === selectedId) || null : null;
  }

  function paint() {
    if (selectedId && !selectedItem()) selectedId = null;
    for (const el of document.querySelectorAll("main [data-id]")) {
      const on = selectedId !== null && el.dataset.id === selectedId && !el.matches(".leaving, .sending");
      el.classList.toggle("selected", on);
      if (on) el.setAttribute("aria-current", "true");
      else el.removeAttribute("aria-current");
    }
  }

  function select(el, focus) {
    selectedId = el.dataset.id;
    paint();
    if (focus) {
      el.setAttribute("tabindex", "-1");
      el.focus({ preventScroll: true });
      el.scrollIntoView({ block: "nearest", behavior: "smooth" });
    }
  }

  function clearSelection() {
    selectedId = null;
    paint();
  }

  function move(step) {
    const list = items();
    if (!list.length) return;
    const index = list.indexOf(selectedItem());
    const next = index < 0 ? (step > 0 ? 0 : list.length - 1) : Math.min(Math.max(index + step, 0), list.length - 1);
    select(list[next], true);
  }

  function press(event, selector, missing) {
    if (event.repeat) return;
    if (Date.now() < quietUntil) {
      toast("Not sent: the keys rest for a moment after an answer. Select the request and press again.", "warn");
      return;
    }
    const card = selectedItem();
    const button = card && card.querySelector(selector);
    if (!button) {
      toast(card ? missing : "Select a request first: j and k move.", "warn");
      return;
    }
    button.form.requestSubmit(button);
  }

  function focusReply() {
    const card = selectedItem();
    if (!card) {
      toast("Select a request first: j and k move.", "warn");
      return;
    }
    const field = card.querySelector("[data-reply]") || card.querySelector("button[data-choice]");
    if (field) field.focus();
  }

  function focusSearch() {
    const fields = [document.querySelector("[data-search]"), document.getElementById("top-search")];
    const field = fields.find((el) => el && el.offsetParent !== null);
    if (field) {
      field.focus();
      field.select();
    } else {
      location.href = "/history";
    }
  }

  function openHelp() {
    if (help && !help.open) help.showModal();
  }

  let pendingG = 0;

  document.addEventListener("keydown", (event) => {
    if (!signedIn || event.defaultPrevented) return;
    const el = event.target;
    const typing = el instanceof Element && el.closest("input, textarea, select, [contenteditable]");
    if (event.key === "Escape") {
      if (typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
        // leave the field for its card; the selection stays what it was
        el.blur();
        const card = el.closest("main [data-id]");
        if (card) {
          card.setAttribute("tabindex", "-1");
          card.focus({ preventScroll: true });
        }
      }
      return;
    }
    if (typing || document.querySelector("dialog[open]")) return;
    const key = shortcut(event);
    if (!key) return;
    const onControl = el instanceof Element && el.closest("a, button, summary");
    if (Date.now() - pendingG < 1200) {
      pendingG = 0;
      if (key === "i") location.href = "/";
      else if (key === "h") location.href = "/history";
      return;
    }
    switch (key) {
      case "j":
        move(1);
        break;
      case "k":
        move(-1);
        break;
      case "a":
        press(event, 'button[data-action="approve"]', "That request is not an approval.");
        break;
      case "d":
        press(event, 'button[data-action="deny"]', "That request is not an approval.");
        break;
      case "r":
        focusReply();
        break;
      case "o":
      case "Enter": {
        if (key === "Enter" && onControl) return;
        const card = selectedItem();
        const link = card && card.querySelector("a[href^='/requests/']");
        if (link) location.href = link.getAttribute("href");
        else return;
        break;
      }
      case "/":
        focusSearch();
        break;
      case "?":
        openHelp();
        break;
      case "g":
        pendingG = Date.now();
        break;
      default:
        if (/^[1-9]$/.test(key)) {
          press(event, `button[data-choice="${key}"]`, `That request has no choice ${key}.`);
          break;
        }
        return;
    }
    event.preventDefault();
  });

  for (const opener of document.querySelectorAll("#help-open, [data-open-help]")) {
    opener.addEventListener("click", openHelp);
  }

  // a click (or tap) on a request selects it: a choice the person made
  document.addEventListener("click", (event) => {
    const card = event.target instanceof Element && event.target.closest("main [data-id]");
    if (card && !card.matches(".leaving, .sending") && card.dataset.id !== selectedId) select(card, false);
  });

  // --- start ----------------------------------------------------------------------------------

  tick();
  setInterval(tick, 15000);
  if (signedIn) connect();
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden) tick();
  });
  if ("serviceWorker" in navigator && window.isSecureContext) {
    navigator.serviceWorker.register("/sw.js").catch(() => undefined);
  }
})();
