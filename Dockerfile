# a JDK, not a JRE: `lakesink deps` compiles lakesink's Delta log store for S3 (connector/table/java) with javac
FROM eclipse-temurin:17-jdk-jammy
RUN apt-get update && apt-get install -y --no-install-recommends python3 python3-venv python3-pip maven \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /opt/lakesink
COPY pyproject.toml README.md ./
COPY connector connector
COPY coordinator coordinator
COPY participant participant
RUN python3 -m venv /opt/venv && /opt/venv/bin/pip install --no-cache-dir . \
    && LAKESINK_CACHE=/opt/lakesink-cache /opt/venv/bin/lakesink deps
ENV PATH=/opt/venv/bin:$PATH LAKESINK_CACHE=/opt/lakesink-cache
ENTRYPOINT ["lakesink"]
CMD ["run", "--config", "/etc/lakesink/lakesink.properties"]
