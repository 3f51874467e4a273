"""Seer dashboard: ``streamlit run dashboard/streamlit_app.py -- [--database-url URL]
[--service-url URL] [--refresh-s S]`` (see docs/dashboard.md).

Not named ``app.py``: Streamlit puts this folder first on ``sys.path``, where a module named
``app`` would hide the service's ``app`` package."""

from __future__ import annotations

import streamlit as st

from dashboard import ui
from dashboard.screens import history, now, speculation, tuning


def main() -> None:
    st.set_page_config(page_title="Seer", layout="wide")
    cfg = ui.config()
    ui.sidebar(cfg)
    pages = [
        st.Page(now.render, title="Now", url_path="now", default=True),
        st.Page(speculation.render, title="Speculation", url_path="speculation"),
        st.Page(history.render, title="History", url_path="history"),
        st.Page(tuning.render, title="Tuning", url_path="tuning"),
    ]
    st.navigation(pages).run()


main()
