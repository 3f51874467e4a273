"""The four pages: thin Streamlit layouts over ``dashboard.views``."""
