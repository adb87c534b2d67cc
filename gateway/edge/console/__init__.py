"""The web console at ``/console``: a page served by the gateway itself (no CDN: its own files
and the chart library from the installed `plotly` package), fed by JSON under
``/console/api/`` (`gateway.edge.console.api`). Admin or console keys only
(`gateway.edge.guard`, `gateway.edge.console.credentials`)."""
