// ksearch serve: keeps the open page current without reloading it. The server sends the store's mark
// (a summary of what it holds) whenever it changes; when it differs from the one the page was drawn
// from, the page's <main> is fetched again and swapped in place. Nothing is fetched from elsewhere.
(function () {
  "use strict";
  const live = document.getElementById("live");
  const say = (text, cls) => { if (live) { live.textContent = text; live.className = "live " + cls; } };
  let busy = false, again = false;
  async function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    try {
      const reply = await fetch(window.location.href, { cache: "no-store" });
      if (!reply.ok) { say("the server answered " + reply.status, "off"); return; }
      const doc = new DOMParser().parseFromString(await reply.text(), "text/html");
      const fresh = doc.querySelector("main");
      const open = Array.from(document.querySelectorAll("details[open]")).map((d) => d.id).filter(Boolean);
      if (fresh) { document.querySelector("main").replaceWith(document.adoptNode(fresh)); }
      open.forEach((id) => { const d = document.getElementById(id); if (d) { d.open = true; } });
      document.body.dataset.mark = doc.body.dataset.mark || "";
      say("live", "on");
    } catch (e) {
      say("cannot reach the server", "off");
    } finally {
      busy = false;
      if (again) { again = false; refresh(); }
    }
  }
  const events = new EventSource("/events");
  events.addEventListener("mark", (e) => {
    say("live", "on");
    if (e.data !== document.body.dataset.mark) { refresh(); }
  });
  events.onerror = () => say("reconnecting…", "off");
})();
