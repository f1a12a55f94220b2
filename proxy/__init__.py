"""swapd proxy: the aiohttp front on the listen port."""
