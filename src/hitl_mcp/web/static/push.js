// hitl-mcp inbox: Web Push. The "Turn on notifications on this device" button (the Devices page)
// asks for the permission (only when pressed), subscribes this browser with the server's VAPID key
// and hands the subscription to the server, which keeps it with whoever is signed in.
(function () {
  "use strict";
  const button = document.getElementById("push-subscribe");
  if (!button) return;
  const status = document.getElementById("push-status");
  const say = (text) => {
    if (status) status.textContent = text;
  };
  if (!("serviceWorker" in navigator) || !("PushManager" in window) || !window.isSecureContext) {
    button.disabled = true;
    say("This browser cannot receive push here. On an iPhone or iPad, open the inbox from the Home Screen; elsewhere, open it over HTTPS.");
    return;
  }
  const csrf = (document.querySelector('meta[name="csrf-token"]') || {}).content || "";

  function keyBytes(text) {
    const raw = atob(text.replace(/-/g, "+").replace(/_/g, "/") + "=".repeat((4 - (text.length % 4)) % 4));
    return Uint8Array.from(raw, (c) => c.charCodeAt(0));
  }

  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const permission = await Notification.requestPermission();
      if (permission !== "granted") {
        say("Notifications are blocked for this site: allow them in the browser's settings, then try again.");
        return;
      }
      const keyResponse = await fetch("/webpush/key", { credentials: "same-origin" });
      if (!keyResponse.ok) throw new Error((await keyResponse.json()).error || "no key");
      const { public_key: key } = await keyResponse.json();
      const registration = await navigator.serviceWorker.register("/sw.js");
      await navigator.serviceWorker.ready;
      const subscription = await registration.pushManager.subscribe({
        userVisibleOnly: true,
        applicationServerKey: keyBytes(key),
      });
      const label = (navigator.userAgentData && navigator.userAgentData.platform) || navigator.platform || "browser";
      const saved = await fetch("/webpush/devices", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify({ subscription: subscription.toJSON(), label: label }),
      });
      const answer = await saved.json();
      if (!saved.ok) throw new Error(answer.error || "refused");
      say("Notifications are on for this device.");
      setTimeout(() => location.reload(), 600);
    } catch (error) {
      say("Could not turn notifications on: " + (error && error.message ? error.message : error));
    } finally {
      button.disabled = false;
    }
  });
})();
