// Listing tools never launches a browser: do not download one on install
// (this machine reaches only package registries).
module.exports = { skipDownload: true };
