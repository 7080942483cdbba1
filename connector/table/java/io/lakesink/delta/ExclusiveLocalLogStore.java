package io.lakesink.delta;

import io.delta.storage.HadoopFileSystemLogStore;
import java.io.FileNotFoundException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.FileAlreadyExistsException;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.Iterator;
import java.util.UUID;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

/**
 * Delta log store for file: tables whose new log files are created exclusively across processes, so two writers in
 * two JVMs on one machine (the coordinator and a user's OPTIMIZE, a live coordinator and a paused zombie) can never
 * both write one log version: the loser gets FileAlreadyExistsException, which Delta turns into a conflict and a
 * retry.
 *
 * <p>Delta's default store for file: (HDFSLogStore) checks that the version is absent and then renames a temporary
 * file onto it through Hadoop's local file system, whose rename replaces an existing file and moves the checksum
 * side file ({@code .N.json.crc}) in a second rename: two writers that pass the check both "succeed", one's commit
 * replaced by the other's, possibly beside the other's checksum. Here the commit is written to a temporary file
 * with plain file I/O (no checksum side file), forced to disk, and published with a hard link, which the file
 * system creates atomically and refuses when the name exists. A write that may overwrite ({@code _last_checkpoint})
 * is an atomic rename, with any checksum side file of the old content removed first. Reads and listings are
 * Hadoop's, which verify a checksum only where a side file exists. Enabled with
 * {@code spark.delta.logStore.file.impl=io.lakesink.delta.ExclusiveLocalLogStore} (docs/ARCHITECTURE.md).
 */
public class ExclusiveLocalLogStore extends HadoopFileSystemLogStore {
    public ExclusiveLocalLogStore(Configuration hadoopConf) {
        super(hadoopConf);
    }

    @Override
    public void write(Path path, Iterator<String> actions, Boolean overwrite, Configuration hadoopConf)
            throws IOException {
        java.nio.file.Path target = local(path, hadoopConf);
        java.nio.file.Path directory = target.getParent();
        if (!Files.isDirectory(directory)) {
            throw new FileNotFoundException("No such file or directory: " + path.getParent());
        }
        String name = target.getFileName().toString();
        java.nio.file.Path temporary = directory.resolve("." + name + "." + UUID.randomUUID() + ".tmp");
        java.nio.file.Path checksum = directory.resolve("." + name + ".crc");
        try {
            try (FileChannel out =
                     FileChannel.open(temporary, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
                while (actions.hasNext()) {
                    ByteBuffer line = ByteBuffer.wrap((actions.next() + "\n").getBytes(StandardCharsets.UTF_8));
                    while (line.hasRemaining()) {
                        out.write(line);
                    }
                }
                out.force(true);
            }
            if (overwrite) {
                Files.deleteIfExists(checksum);
                Files.move(temporary, target, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
            } else {
                try {
                    Files.createLink(target, temporary);
                } catch (FileAlreadyExistsException e) {
                    throw new FileAlreadyExistsException(path.toString());
                }
                // a side file left by a writer of an earlier file of this name cannot describe this one
                Files.deleteIfExists(checksum);
            }
            syncDirectory(directory);
        } finally {
            Files.deleteIfExists(temporary);
        }
    }

    @Override
    public Boolean isPartialWriteVisible(Path path, Configuration hadoopConf) {
        // other writers of the log (checkpoints) write through the file system, where a file is visible while written
        return true;
    }

    private static java.nio.file.Path local(Path path, Configuration hadoopConf) throws IOException {
        FileSystem fs = path.getFileSystem(hadoopConf);
        Path qualified = fs.makeQualified(path);
        if (!"file".equalsIgnoreCase(qualified.toUri().getScheme())) {
            throw new IOException(ExclusiveLocalLogStore.class.getName() + " is for file: tables only, not "
                + qualified + ": set it with spark.delta.logStore.file.impl");
        }
        return Paths.get(qualified.toUri());
    }

    private static void syncDirectory(java.nio.file.Path directory) throws IOException {
        try (FileChannel dir = FileChannel.open(directory, StandardOpenOption.READ)) {
            dir.force(true);
        }
    }
}
