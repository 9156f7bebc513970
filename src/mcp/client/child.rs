//! [`ChildOut`]: a stdio MCP server's stdout, owning the child process,
//! which it ends when the connection goes.

/// A child's stdout, owning the child: the transport holds it, so the
/// process lives as long as the connection.
pub(super) struct ChildOut {
    pub(super) stdout: tokio::process::ChildStdout,
    pub(super) child: Option<tokio::process::Child>,
}

/// How long a stdio server has to exit once its stdin closed.
const CHILD_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

impl Drop for ChildOut {
    /// The connection is gone (its stdin closes with it): the process is
    /// given [`CHILD_GRACE`] to exit on its own, then killed; at once
    /// when there is no runtime to wait on.
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if tokio::time::timeout(CHILD_GRACE, child.wait())
                        .await
                        .is_err()
                    {
                        let _ = child.kill().await;
                    }
                });
            }
            Err(_) => {
                let _ = child.start_kill();
            }
        }
    }
}

impl tokio::io::AsyncRead for ChildOut {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stdout).poll_read(cx, buf)
    }
}
