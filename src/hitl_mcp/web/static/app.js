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

  function toast(message, tone) {
    if (!toasts) return;
    const item = document.createElement("div");
    item.className = "toast" + (tone ? " " + tone : "");
    item.textContent = message;
    toasts.append(item);
    while (toasts.children.length > 3) toasts.firstElementChild.remove();
    setTimeout(() => item.remove(), 6000);
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

  function formError(form, message) {
    const box = form.closest("[data-answer]");
    const slot = box && box.querySelector(".form-error");
    if (slot) {
      slot.textContent = message;
      slot.hidden = false;
    } else {
      toast(message, "warn");
    }
  }

  document.addEventListener("submit", async (event) => {
    const form = event.target;
    if (!(form instanceof HTMLFormElement) || !form.matches("form[data-enhance]")) return;
    event.preventDefault();
    if (form.dataset.busy) return;
    const submitter = event.submitter || null;
    const data = new URLSearchParams(new FormData(form, submitter));
    const buttons = form.querySelectorAll("button");
    form.dataset.busy = "1";
    buttons.forEach((b) => b.setAttribute("aria-busy", "true"));
    const card = form.closest(".card[data-id]");
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
        }
        const note = form.closest(".note");
        if (note) note.remove();
        if (reply.message) toast(reply.message, "ok");
        else if (form.matches("[data-dismiss]")) toast("Dismissed", "ok");
        schedule(0);
      } else if (response.status === 409) {
        if (card) answeredHere.add(card.dataset.id);
        formError(form, reply.error || "Already answered elsewhere.");
        toast(reply.error || "Already answered elsewhere.", "warn");
        schedule(800);
      } else if (response.status === 401) {
        toast("You are signed out: open the login link again.", "warn");
      } else {
        formError(form, reply.error || `Not sent (HTTP ${response.status}).`);
        const field = form.querySelector("textarea");
        if (field) field.focus();
      }
    } catch (_) {
      formError(form, "Could not reach the server. Check the connection and try again.");
    } finally {
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

  function apply(doc) {
    const before = new Map(pendingCards().map((card) => [card.dataset.id, card.dataset.text]));
    const selectedId = selectedItem() && selectedItem().dataset.id;
    const selectedIndex = items().indexOf(selectedItem());
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
    // keep a selection: the same request, else the one that took its place
    const list = items();
    let next = selectedId ? list.find((el) => el.dataset.id === selectedId) : null;
    if (!next && selectedIndex >= 0 && list.length) next = list[Math.min(selectedIndex, list.length - 1)];
    if (next) select(next, false);
    tick();
  }

  // a request that left the inbox without being answered here: say what became of it
  async function announceGone(id, text) {
    let what = { answered: "was answered elsewhere", expired: "expired", cancelled: "was withdrawn" }[
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
          what = "was withdrawn by the agent";
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
        setLive("wait", "Reconnecting…");
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

  function items() {
    if (page === "history") return Array.from(document.querySelectorAll("#history-list .hist[data-id]"));
    return Array.from(document.querySelectorAll("main .card[data-id]"));
  }

  function selectedItem() {
    return document.querySelector("main .selected[data-id]");
  }

  function select(el, focus) {
    for (const other of document.querySelectorAll("main .selected")) {
      if (other !== el) other.classList.remove("selected");
    }
    el.classList.add("selected");
    if (focus) {
      el.setAttribute("tabindex", "-1");
      el.focus({ preventScroll: true });
      el.scrollIntoView({ block: "nearest", behavior: "smooth" });
    }
  }

  function move(step) {
    const list = items();
    if (!list.length) return;
    const index = list.indexOf(selectedItem());
    const next = index < 0 ? (step > 0 ? 0 : list.length - 1) : Math.min(Math.max(index + step, 0), list.length - 1);
    select(list[next], true);
  }

  function target() {
    const chosen = selectedItem();
    if (chosen) return chosen;
    const list = items();
    return list.length === 1 ? list[0] : null;
  }

  function press(selector, missing) {
    const card = target();
    const button = card && card.querySelector(selector);
    if (!button) {
      toast(card ? missing : "Pick a request first: j and k move.", "warn");
      return;
    }
    button.form.requestSubmit(button);
  }

  function focusReply() {
    const card = target();
    if (!card) {
      toast("Pick a request first: j and k move.", "warn");
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
    if (!signedIn || event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
    const el = event.target;
    const typing = el instanceof Element && el.closest("input, textarea, select, [contenteditable]");
    if (event.key === "Escape") {
      if (typing) {
        el.blur();
        const card = el.closest("[data-id]");
        if (card) select(card, true);
      }
      return;
    }
    if (typing || (help && help.open)) return;
    const onControl = el instanceof Element && el.closest("a, button, summary");
    if (Date.now() - pendingG < 1200) {
      pendingG = 0;
      if (event.key === "i") location.href = "/";
      else if (event.key === "h") location.href = "/history";
      return;
    }
    switch (event.key) {
      case "j":
        move(1);
        break;
      case "k":
        move(-1);
        break;
      case "a":
        press('button[data-action="approve"]', "That request is not an approval.");
        break;
      case "d":
        press('button[data-action="deny"]', "That request is not an approval.");
        break;
      case "r":
        focusReply();
        break;
      case "o":
      case "Enter": {
        if (event.key === "Enter" && onControl) return;
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
        if (/^[1-9]$/.test(event.key)) {
          press(`button[data-choice="${event.key}"]`, `That request has no choice ${event.key}.`);
          break;
        }
        return;
    }
    event.preventDefault();
  });

  for (const opener of document.querySelectorAll("#help-open, [data-open-help]")) {
    opener.addEventListener("click", openHelp);
  }

  document.addEventListener("click", (event) => {
    const card = event.target instanceof Element && event.target.closest("main [data-id]");
    if (card && !card.classList.contains("selected")) select(card, false);
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
