"""Streamlit + plotly dashboard: live view of rollouts and speculation tuning (dashboard issue).

It reads through ``core.store`` and talks to the service only through its HTTP API.
"""
