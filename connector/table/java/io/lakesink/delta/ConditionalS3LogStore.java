package io.lakesink.delta;

import io.delta.storage.S3SingleDriverLogStore;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.util.Iterator;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataOutputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.s3a.RemoteFileChangedException;

/**
 * Delta log store for s3a:// tables whose commits are put-if-absent on the store itself, so two writers in two
 * JVMs (a live coordinator and a paused zombie, or lakesink and another engine) can never both write one log
 * version: the loser gets FileAlreadyExistsException, which Delta turns into a conflict and a retry.
 *
 * <p>Delta's S3SingleDriverLogStore only locks within one JVM and then PUTs without a condition. Here a new file
 * is created through S3A's conditional create ({@code fs.option.create.conditional.overwrite}), which sends
 * {@code If-None-Match: *}; the store answers 412 when the key exists, which S3A raises as
 * RemoteFileChangedException. Writes that may overwrite (checkpoint helpers) are left to the parent. Enabled with
 * {@code spark.delta.logStore.s3a.impl=io.lakesink.delta.ConditionalS3LogStore} (docs/ARCHITECTURE.md).
 */
public class ConditionalS3LogStore extends S3SingleDriverLogStore {
    public static final String CONDITIONAL_CREATE = "fs.option.create.conditional.overwrite";

    public ConditionalS3LogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        if (overwrite) {
            super.write(path, actions, true, hadoopConf);
            return;
        }
        FileSystem fs = path.getFileSystem(hadoopConf);
        try (FSDataOutputStream out =
                 (FSDataOutputStream) fs.createFile(path).overwrite(false).must(CONDITIONAL_CREATE, true).build()) {
            while (actions.hasNext()) {
                out.write((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
            }
        } catch (RemoteFileChangedException e) {
            FileAlreadyExistsException exists = new FileAlreadyExistsException(path.toString());
            exists.initCause(e);
            throw exists;
        } catch (org.apache.hadoop.fs.FileAlreadyExistsException e) {
            FileAlreadyExistsException exists = new FileAlreadyExistsException(path.toString());
            exists.initCause(e);
            throw exists;
        }
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        return false;
    }
}
