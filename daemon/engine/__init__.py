"""The Spark side: the session, the joiner operator, and starting a pipeline's query."""
