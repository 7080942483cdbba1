package io.lakesink.tests;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.ChecksumFs;
import org.apache.hadoop.fs.DelegateToFileSystem;
import org.apache.hadoop.fs.FsConstants;
import org.apache.hadoop.fs.FsServerDefaults;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RawLocalFileSystem;
import org.apache.hadoop.fs.local.LocalConfigKeys;

/**
 * Hadoop's local file system for FileContext (what {@code fs.AbstractFileSystem.file.impl} names, LocalFs by
 * default), with one difference: a rename onto a Delta commit file ({@code _delta_log/*.json}) pauses
 * {@code lakesink.test.rename.pause.ms} after Hadoop's own checks that the target is absent and before the rename
 * itself, as a writer descheduled at that instant on a busy machine does. For
 * tests/integration/test_local_log_store.py.
 */
public class PausingLocalFs extends ChecksumFs {
    public PausingLocalFs(URI uri, Configuration conf) throws IOException, URISyntaxException {
        super(new Raw(conf));
    }

    static final class Raw extends DelegateToFileSystem {
        Raw(Configuration conf) throws IOException, URISyntaxException {
            super(FsConstants.LOCAL_FS_URI, new Pausing(conf.getLong("lakesink.test.rename.pause.ms", 0)), conf,
                  FsConstants.LOCAL_FS_URI.getScheme(), false);
        }

        @Override
        public int getUriDefaultPort() {
            return -1;
        }

        @Override
        public FsServerDefaults getServerDefaults(Path f) throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public FsServerDefaults getServerDefaults() throws IOException {
            return LocalConfigKeys.getServerDefaults();
        }

        @Override
        public boolean isValidName(String src) {
            return true;
        }
    }

    static final class Pausing extends RawLocalFileSystem {
        private final long pauseMs;

        Pausing(long pauseMs) {
            this.pauseMs = pauseMs;
        }

        @Override
        public boolean rename(Path src, Path dst) throws IOException {
            if (dst.getName().endsWith(".json") && dst.getParent() != null
                    && "_delta_log".equals(dst.getParent().getName())) {
                try {
                    Thread.sleep(pauseMs);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    throw new IOException("interrupted", e);
                }
            }
            return super.rename(src, dst);
        }
    }
}
