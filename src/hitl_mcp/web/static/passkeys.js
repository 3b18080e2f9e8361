// Passkeys in the inbox (web/people.py, web/stepup.py): enrol one, sign in with one, and approve a
// high-risk request with a fresh assertion. Plain WebAuthn; the server checks everything.
"use strict";
(function () {
  function toBytes(text) {
    const b64 = text.replace(/-/g, "+").replace(/_/g, "/");
    const raw = atob(b64 + "===".slice((b64.length + 3) % 4));
    return Uint8Array.from(raw, (c) => c.charCodeAt(0));
  }
  function toText(buffer) {
    let raw = "";
    for (const byte of new Uint8Array(buffer)) raw += String.fromCharCode(byte);
    return btoa(raw).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  }
  function say(box, text) {
    if (box) { box.hidden = false; box.textContent = text; }
  }
  async function post(url, body, headers) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: Object.assign({"Content-Type": "application/json", "Accept": "application/json"}, headers || {}),
      body: JSON.stringify(body || {}),
    });
    let data = {};
    try { data = await response.json(); } catch (e) { data = {}; }
    if (!response.ok) throw new Error(data.error || ("The server said " + response.status + "."));
    return data;
  }
  function creation(options) {
    options.challenge = toBytes(options.challenge);
    options.user.id = toBytes(options.user.id);
    options.excludeCredentials = (options.excludeCredentials || []).map((c) => Object.assign({}, c, {id: toBytes(c.id)}));
    return options;
  }
  function request(options) {
    options.challenge = toBytes(options.challenge);
    options.allowCredentials = (options.allowCredentials || []).map((c) => Object.assign({}, c, {id: toBytes(c.id)}));
    return options;
  }
  function created(credential) {
    const r = credential.response;
    return {
      id: credential.id, rawId: toText(credential.rawId), type: credential.type,
      response: {
        clientDataJSON: toText(r.clientDataJSON), attestationObject: toText(r.attestationObject),
        transports: r.getTransports ? r.getTransports() : [],
      },
      clientExtensionResults: {}, authenticatorAttachment: credential.authenticatorAttachment || undefined,
    };
  }
  function asserted(credential) {
    const r = credential.response;
    return {
      id: credential.id, rawId: toText(credential.rawId), type: credential.type,
      response: {
        clientDataJSON: toText(r.clientDataJSON), authenticatorData: toText(r.authenticatorData),
        signature: toText(r.signature), userHandle: r.userHandle ? toText(r.userHandle) : undefined,
      },
      clientExtensionResults: {},
    };
  }
  async function enrol(button) {
    const box = document.querySelector("[data-passkey-status]");
    const base = window.location.pathname;
    button.disabled = true;
    try {
      const started = await post(base + "/options");
      const credential = await navigator.credentials.create({publicKey: creation(started.options)});
      const label = (document.querySelector("[data-passkey-label]") || {}).value || "";
      const done = await post(base, {state: started.state, credential: created(credential), label: label});
      say(box, "Your passkey is registered. Opening the inbox…");
      window.location.assign(done.next || "/");
    } catch (error) {
      say(box, "Not registered: " + error.message);
      button.disabled = false;
    }
  }
  async function signin(button) {
    const box = document.querySelector("[data-passkey-status]");
    button.disabled = true;
    try {
      const started = await post("/login/passkey/options");
      const credential = await navigator.credentials.get({publicKey: request(started.options)});
      const then = button.getAttribute("data-next") || "/";
      const done = await post("/login/passkey", {state: started.state, credential: asserted(credential), next: then});
      window.location.assign(done.next || "/");
    } catch (error) {
      say(box, "Not signed in: " + error.message);
      button.disabled = false;
    }
  }
  async function stepUp(button) {
    const id = button.getAttribute("data-step-up");
    const box = document.getElementById("err-" + id);
    const csrf = button.getAttribute("data-csrf") || "";
    const comment = (document.getElementById("comment-" + id) || {}).value || "";
    button.disabled = true;
    try {
      const started = await post("/api/requests/" + id + "/step-up", {decision: "approve"}, {"X-CSRF-Token": csrf});
      const credential = await navigator.credentials.get({publicKey: request(started.options)});
      const done = await post(
        "/api/requests/" + id + "/reply",
        {decision: "approve", comment: comment || undefined, step_up: {state: started.state, credential: asserted(credential)}},
        {"X-CSRF-Token": csrf},
      );
      say(box, done.message || "Approved.");
      window.location.assign("/requests/" + id);
    } catch (error) {
      say(box, "Not approved: " + error.message);
      button.disabled = false;
    }
  }
  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target.closest("button") : null;
    if (!target) return;
    if (target.hasAttribute("data-enrol")) { event.preventDefault(); enrol(target); }
    else if (target.hasAttribute("data-passkey-signin")) { event.preventDefault(); signin(target); }
    else if (target.hasAttribute("data-step-up")) { event.preventDefault(); stepUp(target); }
  });
})();
