/** This package's version (the tests hold it equal to package.json's); sent in the User-Agent. */
export const VERSION = "0.4.0";
