package io.lakesink.delta;

import java.io.IOException;
import java.io.UncheckedIOException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileStatus;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.PathFilter;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager;
import org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager.CancellableFSDataOutputStream;
import org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager;

/**
 * Spark's checkpoint file manager, which Delta uses to write a version's checksum file ({@code _delta_log/N.crc}),
 * with one change for s3a:// paths: an atomic file is one PUT of the object itself, not a temporary object, a copy
 * and a delete. An S3 object appears whole when its upload completes, so the rename adds nothing but requests (about
 * twenty per commit with S3A's probes of both names, docs/performance.md). A file that must not replace another is created with S3A's conditional
 * create ({@code If-None-Match: *}), as the log store creates commits ({@link ConditionalS3LogStore}); {@code cancel}
 * aborts the upload, so nothing appears. Every other path and every other operation is Spark's own
 * FileContext-based manager. Enabled with
 * {@code spark.sql.streaming.checkpointFileManagerClass=io.lakesink.delta.DirectPutCheckpointFileManager}
 * (connector/jvm/spark.py).
 */
public class DirectPutCheckpointFileManager implements CheckpointFileManager {
    private final Configuration hadoopConf;
    private final CheckpointFileManager spark;

    public DirectPutCheckpointFileManager(Path path, Configuration hadoopConf) {
        this.hadoopConf = hadoopConf;
        this.spark = new FileContextBasedCheckpointFileManager(path, hadoopConf);
    }

    @Override
    public CancellableFSDataOutputStream createAtomic(Path file, boolean overwriteIfPossible) {
        if (!"s3a".equalsIgnoreCase(file.toUri().getScheme())) {
            return spark.createAtomic(file, overwriteIfPossible);
        }
        try {
            FileSystem fs = file.getFileSystem(hadoopConf);
            FSDataOutputStream out = overwriteIfPossible
                ? (FSDataOutputStream) fs.createFile(file).overwrite(true).build()
                : (FSDataOutputStream) fs.createFile(file).overwrite(false)
                    .must(ConditionalS3LogStore.CONDITIONAL_CREATE, true).build();
            return new Upload(out);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    /** One object upload: visible at close, never when cancelled. */
    private static final class Upload extends CancellableFSDataOutputStream {
        private final FSDataOutputStream out;

        Upload(FSDataOutputStream out) {
            super(out);
            this.out = out;
        }

        @Override
        public void cancel() {
            out.abort();
        }
    }

    @Override
    public FSDataInputStream open(Path file) {
        return spark.open(file);
    }

    @Override
    public FileStatus[] list(Path dir, PathFilter filter) {
        return spark.list(dir, filter);
    }

    @Override
    public void mkdirs(Path dir) {
        spark.mkdirs(dir);
    }

    @Override
    public boolean exists(Path file) {
        return spark.exists(file);
    }

    @Override
    public void delete(Path file) {
        spark.delete(file);
    }

    @Override
    public boolean isLocal() {
        return spark.isLocal();
    }

    @Override
    public Path createCheckpointDirectory() {
        return spark.createCheckpointDirectory();
    }
}
