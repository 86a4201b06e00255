// The review flow (issue 20, item 3): keys to move and decide, and focus kept where the reviewer
// is when an override is swapped for the next one.
(function () {
  "use strict";

  var KEYS = { j: "next", n: "next", k: "previous", p: "previous", c: "confirm", r: "regret" };
  // Set while a key's action clicks its control (htmx issues the request within the click).
  var byKey = false;

  function typing(target) {
    return target.closest && target.closest("input, textarea, select, [contenteditable]");
  }

  document.addEventListener("keydown", function (event) {
    var item = document.getElementById("review-item");
    if (!item || event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) {
      return;
    }
    if (typing(event.target)) {
      if (event.key === "Escape") {
        event.target.blur();
        var heading = document.getElementById("review-item-heading");
        if (heading) {
          heading.focus();
        }
      }
      return;
    }
    var action = KEYS[event.key];
    if (!action) {
      return;
    }
    var control = item.querySelector('[data-key="' + action + '"]');
    if (!control) {
      return;
    }
    event.preventDefault();
    if (action === "regret") {
      // A regret is worth a reason: the key opens the note, Enter marks it.
      var note = document.getElementById("review-note");
      if (note) {
        note.focus();
        return;
      }
    }
    // htmx wires up swapped-in content when it settles; a key pressed before that would post
    // the form without htmx (a whole page load). Wiring it now is harmless if already done.
    if (window.htmx) {
      window.htmx.process(item);
    }
    byKey = true; // a key, not a control: the new override's heading takes the focus
    try {
      control.click();
    } finally {
      byKey = false;
    }
  });

  // Which control the reviewer was on when the request left: the same one in the next override
  // gets the focus back (Tab, Enter on "Confirm", and the next Enter confirms the next one).
  // Kept on the request itself: a swap that settles late (the one before) must not take the
  // place of the next request's control.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var active = document.activeElement;
    event.detail.xhr.reviewFocusKey =
      (!byKey && active && active.dataset && active.dataset.focusKey) || null;
  });

  document.addEventListener("htmx:afterSettle", function (event) {
    var item = document.getElementById("review-item");
    if (!item || event.detail.target !== item) {
      return;
    }
    // A field of the new override the reviewer is already in (r pressed as the swap settled)
    // keeps the focus: moving it would send their next keys elsewhere.
    if (typing(document.activeElement) && item.contains(document.activeElement)) {
      return;
    }
    var focusKey = event.detail.xhr && event.detail.xhr.reviewFocusKey;
    var again = focusKey && item.querySelector('[data-focus-key="' + focusKey + '"]');
    var heading = document.getElementById("review-item-heading");
    (again || heading).focus();
  });

  // The list's "select all on this page" box ticks every waiting row's box.
  document.addEventListener("change", function (event) {
    if (event.target.id !== "pick-all") {
      return;
    }
    document.querySelectorAll('input.pick[form="bulk-confirm"]').forEach(function (box) {
      box.checked = event.target.checked;
    });
  });
})();
