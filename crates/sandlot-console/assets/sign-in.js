// The sign-in page posts its form to /console/session (form-action 'self'); this script only
// moves the focus to the key field.
import './console.js';

const key = document.getElementById('key');
if (key) key.focus();
