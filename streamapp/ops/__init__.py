"""What operators look at: a worker's web views and the group as the broker sees it.

- `web`: a worker's ``/streamapp/assignment``, ``/metrics`` and its group page
  ``/streamapp/`` (``group_page.html``), whose data ``/streamapp/group`` is every worker's
  view put together (`group_fetch` asks them, `group_page` combines the answers);
- `metrics`: the numbers of ``/metrics``, in Prometheus' text format;
- `group_view` and `group_read`: `streamapp group`, the group from the broker's answers and what
  a change would do.
"""
