"""Page logic as plain functions: store and service results in, plotly figures and table rows
out (no Streamlit, no database here, so every page's content is testable and benchmarkable)."""
