// The trust overview's filters (issue 20, item 10): the form says what the table shows.
(function () {
  "use strict";

  // A sort clicked within the search's debounce: the search still fires after it, so the form's
  // sort field must already hold the new sort, or that search would undo it.
  document.addEventListener("click", function (event) {
    var link = event.target.closest("#agent-table a.sort-link[data-sort]");
    var field = document.getElementById("sort-field");
    if (link && field) {
      field.value = link.dataset.sort;
    }
  });

  // Back and Forward: htmx restores a snapshot of the page taken when the next URL was pushed,
  // after the person had already typed the next query, so the box would show that one. The URL
  // is what the table shows: the fields take their values from it.
  document.addEventListener("htmx:historyRestore", function () {
    var form = document.getElementById("trust-filters");
    if (!form) {
      return;
    }
    var query = new URLSearchParams(window.location.search);
    form.querySelectorAll("input[name], select[name]").forEach(function (field) {
      var fallback = field.name === "sort" ? "name" : "";
      field.value = query.get(field.name) || fallback;
    });
  });
})();
